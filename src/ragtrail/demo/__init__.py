"""The bundled demo: a small RAG pipeline over a policy corpus, instrumented with ragtrail's public API.

``ragtrail demo`` runs it offline with the embedded local store and prints the manifest. The
pipeline (:mod:`ragtrail.demo.pipeline`) is written the way a user would write theirs; the set-up
and read-back live in :mod:`ragtrail.demo.run`.
"""
