"""Per-library auto-instrumentation (one module per library; none imported by ``import ragtrail``)."""
