"""Celery's broker on vsqs queues: a kombu transport (docs/celery.md).

Importing this module registers kombu's transport alias ``vsqs``, so a
broker URL ``vsqs+<queue root>`` (``vsqs+file:///var/spool/celery``,
``vsqs+s3://bucket/celery``) selects :class:`Transport`. Without the import,
``broker_transport = "vsqs.kombu:Transport"`` with ``broker_url = "<queue root>"``
does the same. A Celery queue Q is the vsqs queue ``<root>/Q`` (names vsqs
refuses are escaped: :func:`vsqs_name`).
"""

from __future__ import annotations

from kombu.transport import TRANSPORT_ALIASES

from ._names import celery_name, vsqs_name
from ._transport import Channel, Transport, Unsupported

TRANSPORT_ALIASES["vsqs"] = "vsqs.kombu:Transport"

__all__ = ["Channel", "Transport", "Unsupported", "celery_name", "vsqs_name"]
