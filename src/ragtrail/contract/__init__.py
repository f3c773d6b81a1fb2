"""The wire contract, written once: attribute, event and rule names (:mod:`.semconv`) and the receipt
rules (:mod:`.receipts`). The recorder, the exporter and the inspector all read these modules and
none of them restates a name or a rule (docs/semconv.md is the prose of the same contract)."""
