"""Service functions the web and the CLI call, one module per area; the composition root (gpuslo.engine.core)
builds one of each on its database and hands them out. No caller outside the engine opens a session.

- rulebooks: load, reload, watch the rules folder; the running rulebooks and their stored versions
- lifecycle: acknowledge, resolve, reopen, comment; silences; the auto-resolve job
- queries: violations, events and chart series, read-only
- notifications: the outbox as read by people, retry of a dead letter, receiver health
- slos: measured SLOs (groups, causes, burn history, what a violation cost) and their retention job
- accounts: API tokens, users' logins and web sessions, the audit log
- changes: one audited transaction per human action, with the outbox rows of what it changed
"""
