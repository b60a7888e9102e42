"""Where a model runs and in which float type: the --device and --precision of every command that runs a model
(evaluate, predict, fill-mask, embed, serve, explain, export, mine-negatives), of bertkit.encode / Encoder and of
the Python API, checked once where they enter, before any work.

    placement("auto", "auto")              Placement(cuda:0, bfloat16) on a GPU with bf16, (cpu, float32) on a CPU
    placement("cuda", ...) on a CPU        DeviceError: one line naming what torch reports (a CPU-only build, or
                                           no device visible), before a model is read
    place(model, where)                    the model moved there, its weights cast; a half-precision model hands
                                           its outputs back in float32 (what every reader of them takes)
    where.describe()                       "cuda:0 (NVIDIA H200), bf16": what a command's first line and serve's
                                           /info say

--precision auto is bf16 on a GPU that computes it (fp16 on an older one) and float32 on the CPU, as before;
bf16 on a CPU casts as --quantize bf16 does (faster where the CPU has AVX-512 BF16 / AMX); fp16 is the GPU's.
int8 (--quantize int8) stays the CPU's: on CUDA it is refused here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeVar, get_args

import torch
from torch import Tensor, nn

from .errors import BertkitError
from .options import opt

Precision = Literal["auto", "float32", "bf16", "fp16"]  # the --precision flag of inference (options.py's choices)
PRECISIONS = get_args(Precision)
DTYPES = {"float32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
NAMES = {dtype: name for name, dtype in DTYPES.items()}
DEVICE_HELP = "where the model runs: auto (cuda when there is one), cpu, cuda, cuda:N"
PRECISION_HELP = (
    "the model's float type: auto (bf16 on a GPU that has it, else fp16; float32 on the CPU), float32, bf16, "
    "fp16 (GPU only)"
)

ModuleT = TypeVar("ModuleT", bound=nn.Module)


class DeviceError(BertkitError, ValueError):
    """A device that is not one, or is not here (cuda on a machine without a GPU), or a precision it cannot run."""


def device_opt() -> Any:
    """The --device field of a command's settings (a new field per class: dataclasses own their fields)."""
    return opt("auto", DEVICE_HELP)


def precision_opt() -> Any:
    """The --precision field of a command's settings."""
    return opt("auto", PRECISION_HELP)


def pick_device(name: str | torch.device | None, flag: str = "--device") -> torch.device:
    """The device `name` names, checked: auto (or None) is cuda when torch sees one, else the CPU; cuda on a
    machine where torch sees none, or cuda:N past the last GPU, is a DeviceError naming what torch reports."""
    if name is None or name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):  # torch's own message lists twenty device types
        raise DeviceError(f"{flag} {name!r}: not a device; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"{flag} {name}: no CUDA device is available here ({why_no_cuda()}); use --device cpu")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise DeviceError(f"{flag} {name}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise DeviceError(f"{flag} {name}: no Apple GPU (MPS) is available here; use --device cpu")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise DeviceError(f"{flag} {name}: bertkit runs on cpu, cuda or mps")
    return device


def why_no_cuda() -> str:
    """What torch reports when it sees no CUDA device: a CPU-only build, or a CUDA build that finds no GPU."""
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build"
    return f"torch {torch.__version__} (CUDA {torch.version.cuda}) finds no GPU: torch.cuda.is_available() is False"


def inference_dtype(precision: str | None, device: torch.device, flag: str = "--precision") -> torch.dtype:
    """The float type `precision` names on `device`: auto is bf16 on a GPU that computes it (else fp16) and float32
    elsewhere; fp16 on a CPU is a DeviceError (slow there, and bf16 keeps float32's range)."""
    if precision is None or precision == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if precision not in DTYPES:
        raise DeviceError(f"{flag} {precision!r}: choose one of {', '.join(PRECISIONS)}")
    if precision == "fp16" and device.type == "cpu":
        raise DeviceError(f"{flag} fp16 is for GPUs; on the CPU use bf16 (or float32)")
    return DTYPES[precision]


@dataclass(frozen=True)
class Placement:
    """Where a model runs and its float type."""

    device: torch.device
    dtype: torch.dtype

    def describe(self) -> str:
        """e.g. "cuda:0 (NVIDIA H200), bf16" or "cpu, float32"."""
        where = str(self.device)
        if self.device.type == "cuda":
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            where = f"cuda:{index} ({torch.cuda.get_device_name(index)})"
        return f"{where}, {NAMES[self.dtype]}"

    @property
    def name(self) -> str:
        """The float type's name: float32, bf16 or fp16."""
        return NAMES[self.dtype]


CPU = Placement(torch.device("cpu"), torch.float32)  # where a model loads, and where it ran before --device


def placement(device: str | torch.device | None, precision: str | None, quantize: str | None = None) -> Placement:
    """--device and --precision checked together (and --quantize against them: int8 and bf16 weights are the
    CPU's, so auto with --quantize is the CPU), before any work: a DeviceError naming the flag otherwise."""
    where = torch.device("cpu") if quantize is not None and device in (None, "auto") else pick_device(device)
    if quantize is not None and where.type != "cpu":
        raise DeviceError(
            f"--quantize {quantize} is for CPU inference, and --device {device} runs on {where}: on a GPU use "
            "--precision bf16 or fp16 (auto: bf16), or --device cpu for int8"
        )
    return Placement(where, inference_dtype(precision, where))


def place(model: ModuleT, where: Placement) -> ModuleT:
    """`model` moved to `where.device` and cast to `where.dtype` (in place; returned). A model in bf16 / fp16 hands
    its outputs back in float32 (cast_outputs)."""
    model.to(where.device)
    return model if where.dtype == torch.float32 else cast_outputs(model, where.dtype)


def cast_outputs(model: ModuleT, dtype: torch.dtype) -> ModuleT:
    """Weights and activations in `dtype` (bf16 / fp16); the outputs' floating tensors back in float32 for what
    reads them. Marks the model (half_precision) so that a second cast does nothing."""
    if half_precision(model):
        return model
    model.to(dtype)

    def to_float32(module: nn.Module, inputs: tuple[Any, ...], output: object) -> object:
        for name, value in vars(output).items() if hasattr(output, "__dict__") else ():
            if isinstance(value, Tensor) and value.is_floating_point():
                setattr(output, name, value.float())
        return output

    # torch types Module.__setattr__'s value as Tensor | Module; a hook handle is stored as any other value
    model._float32_outputs = model.register_forward_hook(to_float32)  # type: ignore[assignment]
    return model


def half_precision(model: nn.Module) -> bool:
    """Whether cast_outputs cast `model` already."""
    return getattr(model, "_float32_outputs", None) is not None
