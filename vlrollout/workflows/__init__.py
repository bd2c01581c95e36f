"""Rollout workflows: AReaL ``RolloutWorkflow`` subclasses sharing one packaging core.

Importable by string path, as AReaL configs name workflows::

    workflow: vlrollout.workflows.VisionRLVRWorkflow
"""

from vlrollout.workflows.multi_attempt import MultiAttemptWorkflow, VisionMultiAttemptWorkflow
from vlrollout.workflows.single_turn import RLVRWorkflow, SingleTurnWorkflow, VisionRLVRWorkflow
from vlrollout.workflows.tool_use import VisionToolWorkflow

__all__ = [
    "MultiAttemptWorkflow",
    "RLVRWorkflow",
    "SingleTurnWorkflow",
    "VisionMultiAttemptWorkflow",
    "VisionRLVRWorkflow",
    "VisionToolWorkflow",
]
