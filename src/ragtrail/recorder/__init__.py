"""The recorder: one span per pipeline stage, carrying its retrieval manifest (docs/semconv.md §1-4).

It knows no library. Hooks (``ragtrail.instrumentation``, the decorators in ``ragtrail.api``) use
only this public surface, never a private attribute:

- :mod:`ragtrail.recorder.stage`: ``Stage`` (``query``, ``add_query_variant``, ``inputs``,
  ``outputs``, ``exclude``, ``set_status``, ``set``, ``corpus_size``, ``set_attribute``,
  ``finding``, ``cite``, ``adapt``, ``record_error``), ``stage()``, ``current_stage()``;
- :mod:`ragtrail.recorder.pipeline`: ``PipelineState`` (side-effect-free ``lookup_hop``,
  ``has_hops``, ``hop_count``, ``candidate_hop``, ``candidate_score_kind``; creating calls
  ``new_hop``, ``given_hop`` and ``untracked_hop``), ``Hop``, ``current_pipeline()``;
- :mod:`ragtrail.recorder.candidates`: ``Candidate`` (``copy``, ``with_receipt``), ``adapt``,
  ``is_candidate_list``, ``normalize_id``, ``register_adapter``, ``unregister_adapter``,
  ``lookup_adapter``, ``CONTENT_KEYS``;
- :mod:`ragtrail.recorder.errors`: ``record_internal_error``, ``internal_error_count``, ``guarded``;
- :mod:`ragtrail.recorder.answer`: ``answer()``.

Inside, by job: ``writer`` (the end-of-stage write order), ``exclusions`` (pure derivation),
``events`` (build, digest, spill), ``sdk_events`` (the SDK fast path and its probe), ``mirrors``
(GenAI, OpenInference), ``values`` (Python values as OTel attribute values). See
docs/architecture.md.
"""
