"""The engine section every recipe reads: ``engine:`` in ``vlrollout run``'s config and
``vlrollout.engine`` in ``vlrollout train``'s, the same dataclass with the same checks."""

from __future__ import annotations

from dataclasses import dataclass, field

from vlrollout.errors import ConfigError

ENGINE_KINDS = ("local", "sglang", "vllm")


@dataclass
class EngineConfig:
    """Which engine serves the requests: the embedded one in this process, or AReaL's remote
    engine talking to running servers.

    Each key is declared once, with its help text in ``metadata["help"]``;
    ``scripts/render_config_doc.py`` renders them into ``docs/config.md``.
    """

    kind: str = field(
        default="local",
        metadata={
            "help": "`local` (the embedded transformers engine in this process), or "
            "`sglang`/`vllm` (AReaL's remote engine classes, pointed at running servers such as "
            "`vlrollout serve`; in training, weights reach them through AReaL's disk update "
            "over HTTP)."
        },
    )
    model: str = field(
        default="assets/tiny-qwen2vl",
        metadata={
            "help": "Local model folder (weights, tokenizer, processor); also the tokenizer and "
            "processor path of a remote engine. `vlrollout train` rolls out the actor's weights: "
            "there it stays empty and `actor.path` is used."
        },
    )
    device: str = field(
        default="cpu", metadata={"help": "`cpu`, `cuda` or `cuda:N` for the local engine."}
    )
    addresses: list[str] = field(
        default_factory=list,
        metadata={"help": "`host:port` of the servers, for a remote engine."},
    )
    deterministic: bool | None = field(
        default=None,
        metadata={
            "help": "Form the local engine's batches independently of request timing, so a "
            "seeded run gives the same tokens under any load (sequences are decoded one at a "
            "time, a group's prompt prefilled once: slower). Unset: on when `vlrollout run` is given a seed, off in training."
        },
    )
    compile: bool = field(
        default=False,
        metadata={
            "help": "Compile the local engine's decode step with `torch.compile`: faster steps "
            "after tens of seconds of compiling when the engine is built."
        },
    )
    max_batch_size: int = field(
        default=8,
        metadata={
            "help": "Requests the local engine decodes together (one row each). A GRPO step "
            "submits items x group size requests at once; on a CPU a step's cost is mostly "
            "per-forward overhead, so more rows per forward finish the step sooner."
        },
    )

    def __post_init__(self) -> None:
        if self.kind not in ENGINE_KINDS:
            raise ConfigError(
                f"engine.kind must be one of {', '.join(ENGINE_KINDS)}, got {self.kind!r}"
            )
        if self.kind != "local" and not self.addresses:
            raise ConfigError(
                f"engine.kind={self.kind!r} needs engine.addresses, the host:port of running "
                f"servers (`vlrollout serve --protocol {self.kind}`); with vlrollout run, "
                "pass --address HOST:PORT"
            )
        if self.kind == "local" and self.addresses:
            raise ConfigError(
                f"engine.addresses (--address) is for a remote engine; add --engine sglang or "
                f"vllm (vlrollout.engine.kind in training) to send rollouts to "
                f"{', '.join(self.addresses)}, or drop the addresses to run the local engine"
            )
        for address in self.addresses:
            host, sep, port = address.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ConfigError(
                    f"engine address {address!r} must be HOST:PORT, e.g. 127.0.0.1:30000"
                )
        if self.max_batch_size < 1:
            raise ConfigError(f"engine.max_batch_size must be >= 1, got {self.max_batch_size}")
        if not is_device_name(self.device):
            raise ConfigError(
                f"engine.device (--device) must be cpu, cuda or cuda:N, got {self.device!r}"
            )


def is_device_name(device: str) -> bool:
    """``cpu``, ``cuda`` or ``cuda:N``: the devices the local engine runs on.

    >>> [is_device_name(d) for d in ("cpu", "cuda:1", "tpu", "cuda:x")]
    [True, True, False, False]
    """
    return device in ("cpu", "cuda") or (device.startswith("cuda:") and device[5:].isdigit())
