"""The writing wing of the pipeline: the sinks the loop hands records to (`sink`: the output store, an
in-memory table, none), the output store and its files (`store` under `lock`; `ledger`, `parts`, `join`,
`manifest`, `kept_types`), and the output formats (`write`, one writer per format in `writers/`). It imports nothing of the pipeline above it, nor
the reading wing (input/)."""
