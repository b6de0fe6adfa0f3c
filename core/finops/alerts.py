"""The alert message for an anomaly: Slack-compatible JSON (``text`` + ``blocks``) that any
webhook receiver can also read as data (``gpufabric`` holds the anomaly's fields)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any


def _usd(value: object) -> str:
    return f"${Decimal(str(value)):,.2f}"


def slack_payload(anomaly: Mapping[str, Any]) -> dict[str, Any]:
    hour = anomaly["hour"]
    hour_text = hour.strftime("%Y-%m-%d %H:00 UTC") if isinstance(hour, datetime) else str(hour)
    headline = (
        f"GPU cost anomaly: {anomaly['client']} / {anomaly['agent_type']} / {anomaly['tier']} "
        f"spent {_usd(anomaly['actual_usd'])} in {hour_text} (expected {_usd(anomaly['expected_usd'])}, "
        f"+{_usd(anomaly['impact_usd'])})"
    )
    fields = {
        "anomaly_id": anomaly["anomaly_id"],
        "client": anomaly["client"],
        "agent_type": anomaly["agent_type"],
        "tier": anomaly["tier"],
        "hour": hour.isoformat() if isinstance(hour, datetime) else str(hour),
        "method": anomaly["method"],
        "expected_usd": str(anomaly["expected_usd"]),
        "actual_usd": str(anomaly["actual_usd"]),
        "impact_usd": str(anomaly["impact_usd"]),
        "score": float(anomaly["score"]),
    }
    return {
        "text": headline,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*{headline}*"}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": (
                f"method `{anomaly['method']}` · score {float(anomaly['score']):.1f} · "
                f"id `{anomaly['anomaly_id']}`")}]},
        ],
        "gpufabric": fields,
    }
