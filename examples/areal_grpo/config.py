"""The example's experiment config: AReaL's ``GRPOConfig`` plus a ``vlrollout`` section.

This lives in its own module, not in the entry script, because AReaL's single-controller
scheduler sends the whole config to every worker with its class import path
(``examples.areal_grpo.config.VisionGRPOConfig``); a class defined in ``__main__`` could not be
rebuilt there. AReaL's own examples with extra config fields do the same
(``examples/multi_turn_math/config.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from areal.api.cli_args import GRPOConfig


@dataclass
class VLRolloutConfig:
    """Arguments of :class:`vlrollout.workflows.VisionRLVRWorkflow` that the YAML sets.

    Everything here is a plain value, because AReaL's single-controller mode sends
    ``workflow_kwargs`` to the rollout workers as JSON; the workers build the workflow from it.

    Attributes:
        reward: Import path of a reward callable with AReaL's per-sample signature, e.g.
            ``examples.areal_grpo.rewards.shapes`` (a module-level reward built from
            :mod:`vlrollout.rewards`). A registry name such as ``count`` cannot travel to the
            workers: bind it to a module-level name and give that name's path.
        processor_path: Local folder or hub name of the processor; empty means ``tokenizer_path``.
        preprocessor: A preprocessor name or import path (``None``: the default for the processor).
        enable_thinking: Passed to the chat template.
        min_pixels, max_pixels: Resize limits for the default preprocessor (``None``: the
            processor's own).
        reward_timeout_s: Seconds before an episode is rejected with ``reward_timeout``.
        max_prompt_tokens: Longer prompts are rejected with ``prompt_too_long`` (``None``: no limit).
    """

    reward: str = "examples.areal_grpo.rewards.shapes"
    processor_path: str = ""
    preprocessor: str | None = None
    enable_thinking: bool = False
    min_pixels: int | None = None
    max_pixels: int | None = None
    reward_timeout_s: float = 15.0
    max_prompt_tokens: int | None = None

    def __post_init__(self) -> None:
        if "." not in self.reward:
            raise ValueError(
                f"vlrollout.reward must be an import path (AReaL sends workflow arguments to its "
                f"rollout workers as JSON), got {self.reward!r}; for a registry reward write "
                f"e.g. `my_rewards.py: count = get_reward({self.reward!r})` and set "
                f"vlrollout.reward=my_rewards.count"
            )
        for name in ("min_pixels", "max_pixels", "max_prompt_tokens"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"vlrollout.{name} must be positive or null, got {value}")
        if (
            self.min_pixels is not None
            and self.max_pixels is not None
            and self.min_pixels > self.max_pixels
        ):
            raise ValueError(
                f"vlrollout.min_pixels ({self.min_pixels}) exceeds vlrollout.max_pixels "
                f"({self.max_pixels})"
            )
        if self.reward_timeout_s <= 0:
            raise ValueError(
                f"vlrollout.reward_timeout_s must be positive, got {self.reward_timeout_s}"
            )


@dataclass
class VisionGRPOConfig(GRPOConfig):
    """AReaL's ``GRPOConfig`` with the workflow settings of :class:`VLRolloutConfig`."""

    vlrollout: VLRolloutConfig = field(default_factory=VLRolloutConfig)
