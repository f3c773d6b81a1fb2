"""The recorder: one span per pipeline stage, carrying its retrieval manifest (docs/semconv.md §1-4).

It knows no library. Hooks (``ragtrail.instrumentation``, the decorators in ``ragtrail.api``) use
only its public modules, and in them only the names each exports in ``__all__`` (listed in
docs/architecture.md, "Where a new library integration goes"; ``tests/test_exported_members.py``
holds the list and the code equal): :mod:`ragtrail.recorder.stage`, :mod:`ragtrail.recorder.pipeline`,
:mod:`ragtrail.recorder.candidates`, :mod:`ragtrail.recorder.errors`, :mod:`ragtrail.recorder.answer`.

Inside, by job: ``record`` (a stage's record and its conclusion), ``conclude`` (what a stage's end
derives: exclusions, status, hops, counts, the pipeline's bookkeeping; pure of spans), ``writer``
(the end-of-stage write order; it sees the record, never the stage), ``exclusions`` (pure
derivation), ``rescoring``, ``events`` (build, digest, spill), ``sdk_events`` (the SDK fast path and
its probe), ``mirrors`` (GenAI, OpenInference), ``values`` (Python values as OTel attribute values),
``corpus`` (store sizes), ``metrics`` (the counts made before any sampling, every stage, through
the global MeterProvider: docs/semconv.md §9). See docs/architecture.md.
"""

__all__: list[str] = []
