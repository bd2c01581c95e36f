"""The report's overview: counts, rejections by reason, a reward histogram per task (drawn by
:mod:`vlrollout.charts`), and the fraction of GRPO groups whose rewards are all equal (zero
advantages: they teach nothing)."""

from __future__ import annotations

import html
from typing import Any

from vlrollout.charts import histogram_chart


def overview_html(summary: dict[str, Any], rewards_by_task: dict[str, list[float]]) -> str:
    """The page's header section."""
    items, episodes = summary.get("items", {}), summary.get("episodes", {})
    rows = "".join(
        f"<tr><td>{html.escape(task)}</td><td class=r>{len(values)}</td>"
        f"<td class=r>{(sum(values) / len(values)) if values else float('nan'):.3f}</td>"
        f"<td>{histogram_chart(values)}</td></tr>"
        for task, values in sorted(rewards_by_task.items())
    )
    reasons = ", ".join(f"{k}: {v}" for k, v in episodes.get("rejected_by_reason", {}).items())
    groups = summary.get("groups") or {}
    fraction = groups.get("fraction_all_equal")
    group_line = (
        f"<p>{groups['all_equal']}/{groups['groups']} GRPO groups ({fraction:.0%}) have all-equal "
        "rewards: their advantages are zero, so they teach nothing.</p>"
        if fraction is not None
        else ""
    )
    others = items.get("other_items_in_folder", 0)
    other_line = (
        f"<p>The output folder holds {others} more finished items, from runs over more of the "
        "data (a larger --limit); this summary covers this run's items.</p>"
        if others
        else ""
    )
    return (
        f"{other_line}<p>{items.get('done', 0)}/{items.get('total', 0)} items, "
        f"{episodes.get('accepted', 0)} episodes kept, {episodes.get('rejected', 0)} rejected"
        f"{' (' + html.escape(reasons) + ')' if reasons else ''}</p>{group_line}"
        "<table><tr><th>task</th><th>episodes</th><th>mean reward</th><th>rewards</th></tr>"
        f"{rows}</table>"
    )
