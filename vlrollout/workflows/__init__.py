"""Rollout workflows: AReaL ``RolloutWorkflow`` subclasses sharing one base and one packaging core.

One base, :class:`EpisodeWorkflow` (context, text or vision preparation, parity check, ledger),
and three episode shapes: :class:`SingleTurnWorkflow`, :class:`MultiAttemptWorkflow`,
:class:`ToolUseWorkflow`. AReaL's names are thin aliases of the shapes so AReaL configs work::

    workflow: vlrollout.workflows.VisionRLVRWorkflow
"""

from vlrollout.workflows.episode import EpisodeWorkflow
from vlrollout.workflows.multi_attempt import MultiAttemptWorkflow, VisionMultiAttemptWorkflow
from vlrollout.workflows.preparation import FrameSampling
from vlrollout.workflows.single_turn import RLVRWorkflow, SingleTurnWorkflow, VisionRLVRWorkflow
from vlrollout.workflows.tool_use import ToolUseWorkflow, VisionToolWorkflow

__all__ = [
    "EpisodeWorkflow",
    "FrameSampling",
    "MultiAttemptWorkflow",
    "RLVRWorkflow",
    "SingleTurnWorkflow",
    "ToolUseWorkflow",
    "VisionMultiAttemptWorkflow",
    "VisionRLVRWorkflow",
    "VisionToolWorkflow",
]
