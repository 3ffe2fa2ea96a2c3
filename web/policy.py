"""Which permission every route needs. A route missing here is refused for everyone (and fails a test).

Permissions are the token scopes of gpuslo.engine.access; PUBLIC needs no credentials at all.
"""

from __future__ import annotations

from gpuslo.engine.access import ADMIN, INGEST, OPERATE, READ

PUBLIC = "public"

ROUTE_POLICY: dict[str, str] = {
    "static": PUBLIC,
    "ops.healthz": PUBLIC,  # load balancers probe it without credentials; it says nothing sensitive
    "ops.metrics": READ,  # rule ids and hosts are in the labels: scrape with a read token
    "auth.login": PUBLIC,
    "auth.logout": PUBLIC,
    # ingest and reading
    "api.post_events": INGEST,
    "integrations_api.alertmanager_webhook": INGEST,  # Alertmanager's webhook_configs send an ingest token
    "api.event_schema": READ,
    "api.list_violations": READ,
    "api.get_violation": READ,
    "api.list_events": READ,
    "api.list_rulebooks": READ,
    "ui.index": READ,
    "ui.violations": READ,
    "ui.violation": READ,
    "ui.rulebooks": READ,
    "ui.events": READ,
    "slos_api.list_slos": READ,
    "slos_api.get_slo": READ,
    "slos_ui.slos_page": READ,
    "slos_ui.slo_page": READ,
    "charts_ui.tokens": READ,
    "charts_ui.memory": READ,
    # lifecycle and silences
    "lifecycle_api.change_status": OPERATE,
    "lifecycle_api.add_comment": OPERATE,
    "lifecycle_api.list_silences": READ,
    "lifecycle_api.create_silence": OPERATE,
    "lifecycle_api.expire_silence": OPERATE,
    "lifecycle_ui.change_status": OPERATE,
    "lifecycle_ui.add_comment": OPERATE,
    "lifecycle_ui.silences_page": READ,
    "lifecycle_ui.create_silence": OPERATE,
    "lifecycle_ui.expire_silence": OPERATE,
    # notifications and their delivery attempts; a retry sends a dead notification again
    "notifications_api.violation_notifications": READ,
    "notifications_api.list_notifications": READ,
    "notifications_api.retry_notification": OPERATE,
    "notifications_ui.notifications_page": READ,
    "notifications_ui.retry_notification": OPERATE,
    # receiver health; re-enabling a receiver that a 410 Gone disabled
    "notifications_api.list_receivers": READ,
    "notifications_api.enable_receiver": OPERATE,
    "notifications_ui.enable_receiver": OPERATE,
    # administration and the audit log (source addresses and failed logins are in it)
    "admin_api.list_audit": ADMIN,
    "admin_api.list_tokens": ADMIN,
    "admin_api.create_token": ADMIN,
    "admin_api.revoke_token": ADMIN,
    "admin_api.reload_rulebooks": ADMIN,
    "audit_ui.audit_page": ADMIN,
    # clustered stall causes
    "stalls_ui.stall_causes_page": READ,
    "stalls_ui.stall_clusters_api": READ,
}
