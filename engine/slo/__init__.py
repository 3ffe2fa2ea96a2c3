"""Measured SLOs: SLIs counted from events, error budgets, burn rates, burn-rate alerts and budget spent per cause.

`model` holds the frozen SLI objects, `checks` validates a rulebook's `indicator:` sections and `build` makes
them, `maths` the budget and burn-rate formulas, `counter` the engine-side counting and burn alerts, `store`
the bucket tables' reads and writes, `attribution` which violations a bad request is charged to, and `export`
the Prometheus and OpenSLO documents.
"""
