"""The wire contract, written once: attribute, event and rule names (:mod:`.semconv`), the receipt
rules (:mod:`.receipts`) and the candidate column codec (:mod:`.columns`, each column rule's encoding
beside its decoding). The recorder, the exporter and the inspector all read these modules and none of
them restates a name or a rule (docs/semconv.md is the prose of the same contract)."""
