"""``GradScaler``: loss scaling for training with float16 gradients, as torch's: the loss is multiplied by
a scale before backward, the gradients divided by it before the optimizer step, a step whose gradients
hold an inf or NaN is skipped, and the scale shrinks after such a step and grows after ``growth_interval``
good ones."""

from __future__ import annotations

import warnings
from collections import abc, defaultdict
from enum import Enum

import jitorch

__all__ = ["OptState", "GradScaler"]


class OptState(Enum):
    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _refresh_per_optimizer_state():
    return {"stage": OptState.READY, "found_inf_per_device": {}}


class _MultiDeviceReplicator:
    """A tensor's copies on the devices asked for, made once per device."""

    def __init__(self, master):
        self.master = master
        self._per_device_tensors = {}

    def get(self, device):
        found = self._per_device_tensors.get(device)
        if found is None:
            found = self._per_device_tensors[device] = self.master.to(device=device, copy=True)
        return found


def non_finite_check_and_unscale_(grads, found_inf, inv_scale):
    """torch's ``_amp_foreach_non_finite_check_and_unscale_``: each gradient multiplied in place by
    ``inv_scale`` (a 0-d float32 tensor); ``found_inf`` (0-d float32) set to 1.0 if any holds an inf or
    NaN. No value leaves the device."""
    for g in grads:
        bad = jitorch.logical_not(jitorch.isfinite(g)).any().to(found_inf.dtype)
        found_inf.copy_(jitorch.maximum(found_inf, bad))
        g.mul_(inv_scale)


def update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    """torch's ``_amp_update_scale_``, in place on the 0-d ``scale`` (float32) and ``growth_tracker``
    (int32): after a step with infs the scale is multiplied by ``backoff_factor`` and the tracker reset;
    else the tracker counts the step, and at ``growth_interval`` the scale is multiplied by
    ``growth_factor`` (unless that overflows) and the tracker reset. The products are computed in double
    and rounded to float32, as torch's kernel does."""
    found = found_inf != 0
    successful = growth_tracker + 1
    grow = jitorch.logical_and(jitorch.logical_not(found), successful == growth_interval)
    wide = scale.double()
    grown = (wide * growth_factor).float()
    grown = jitorch.where(jitorch.isfinite(grown), grown, scale)
    new_scale = jitorch.where(found, (wide * backoff_factor).float(), jitorch.where(grow, grown, scale))
    reset = jitorch.logical_or(found, grow)
    new_tracker = jitorch.where(reset, jitorch.zeros_like(successful), successful).to(growth_tracker.dtype)
    scale.copy_(new_scale)
    growth_tracker.copy_(new_tracker)


class GradScaler:
    """Scales the loss so that small float16 gradients do not flush to zero, unscales the gradients
    before each step, skips steps whose gradients overflowed and adapts the scale::

        scaler = jitorch.amp.GradScaler("cuda")
        for input, target in data:
            optimizer.zero_grad()
            with jitorch.autocast("cuda"):
                loss = loss_fn(model(input), target)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

    ``device`` is the device type of the scale ("cuda" by default: without CUDA such a scaler warns and
    is disabled, as torch's). A disabled scaler passes everything through: ``scale`` returns its input,
    ``step`` just steps."""

    def __init__(self, device="cuda", init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        self._device = device
        self._enabled = enabled
        if device == "cuda" and enabled and not jitorch.cuda.is_available():
            warnings.warn("jitorch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.",
                          stacklevel=2)
            self._enabled = False
        if self._enabled:
            if growth_factor <= 1.0:
                raise AssertionError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise AssertionError("The backoff factor must be < 1.0.")
            self._init_scale = init_scale
            self._scale = None
            self._growth_factor = growth_factor
            self._backoff_factor = backoff_factor
            self._growth_interval = growth_interval
            self._init_growth_tracker = 0
            self._growth_tracker = None
            self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)

    def _check_scale_growth_tracker(self, funcname):
        fix = "This may indicate your script did not use scaler.scale(loss or outputs) earlier in the iteration."
        if self._scale is None:
            raise AssertionError(f"Attempted {funcname} but _scale is None.  " + fix)
        return self._scale, self._growth_tracker

    def _lazy_init_scale_growth_tracker(self, device):
        self._scale = jitorch.full((), self._init_scale, dtype=jitorch.float32, device=device)
        self._growth_tracker = jitorch.full((), self._init_growth_tracker, dtype=jitorch.int32, device=device)

    def scale(self, outputs):
        """``outputs`` (a tensor, or an iterable of them) multiplied by the scale factor."""
        if not self._enabled:
            return outputs
        stash = []  # one replicator of the scale for the whole call

        def apply_scale(val):
            if isinstance(val, jitorch.Tensor):
                if not stash:
                    if self._scale is None:
                        self._lazy_init_scale_growth_tracker(val.device)
                    stash.append(_MultiDeviceReplicator(self._scale))
                return val * stash[0].get(val.device)
            if isinstance(val, abc.Iterable):
                scaled = map(apply_scale, val)
                return type(val)(scaled) if isinstance(val, (list, tuple)) else scaled
            raise ValueError("outputs must be a Tensor or an iterable of Tensors")
        return apply_scale(outputs)

    def _unscale_grads_(self, optimizer, inv_scale, found_inf, allow_fp16):
        """Unscale the gradients of ``optimizer``'s parameters by device and dtype; the found_inf flag of
        each device."""
        per_device_inv_scale = _MultiDeviceReplicator(inv_scale)
        per_device_found_inf = _MultiDeviceReplicator(found_inf)
        grads = defaultdict(lambda: defaultdict(list))
        with jitorch.no_grad():
            for group in optimizer.param_groups:
                for param in group["params"]:
                    if param.grad is None:
                        continue
                    if not allow_fp16 and param.grad.dtype is jitorch.float16:
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    grads[param.grad.device][param.grad.dtype].append(param.grad)
            for device, per_dtype in grads.items():
                for same_dtype in per_dtype.values():
                    non_finite_check_and_unscale_(same_dtype, per_device_found_inf.get(device),
                                                  per_device_inv_scale.get(device))
        return per_device_found_inf._per_device_tensors

    def unscale_(self, optimizer):
        """Divide ``optimizer``'s gradients by the scale factor now (to clip or inspect them before
        `step`), and note whether any is inf or NaN. Once per optimizer per step."""
        if not self._enabled:
            return
        self._check_scale_growth_tracker("unscale_")
        optimizer_state = self._per_optimizer_states[id(optimizer)]
        if optimizer_state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if optimizer_state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = self._scale.double().reciprocal().float()
        found_inf = jitorch.full((), 0.0, dtype=jitorch.float32, device=self._scale.device)
        optimizer_state["found_inf_per_device"] = self._unscale_grads_(optimizer, inv_scale, found_inf, False)
        optimizer_state["stage"] = OptState.UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """Unscale ``optimizer``'s gradients (unless `unscale_` did) and call ``optimizer.step(*args,
        **kwargs)`` if none is inf or NaN; returns what that returns (None for a skipped step)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        self._check_scale_growth_tracker("step")
        optimizer_state = self._per_optimizer_states[id(optimizer)]
        if optimizer_state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if optimizer_state["stage"] is OptState.READY:
            self.unscale_(optimizer)
        if not optimizer_state["found_inf_per_device"]:
            raise AssertionError("No inf checks were recorded for this optimizer.")
        retval = None
        if not sum(v.item() for v in optimizer_state["found_inf_per_device"].values()):
            retval = optimizer.step(*args, **kwargs)
        optimizer_state["stage"] = OptState.STEPPED
        return retval

    def update(self, new_scale=None):
        """Update the scale after this iteration's steps: back off if any optimizer's gradients held
        infs, grow after ``growth_interval`` clean steps; or set it to ``new_scale`` (a float or a
        1-element tensor)."""
        if not self._enabled:
            return
        scale, growth_tracker = self._check_scale_growth_tracker("update")
        if new_scale is not None:
            self._set_scale(new_scale)
        else:
            found_infs = [found_inf.to(device=scale.device) for state in self._per_optimizer_states.values()
                          for found_inf in state["found_inf_per_device"].values()]
            if not found_infs:
                raise AssertionError("No inf checks were recorded prior to update.")
            update_scale_(scale, growth_tracker, sum(found_infs[1:], found_infs[0]), self._growth_factor,
                          self._backoff_factor, self._growth_interval)
        self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)

    def _set_scale(self, new_scale):
        if isinstance(new_scale, float):
            self._scale.fill_(new_scale)
            return
        reason = ("new_scale should be a float or a 1-element torch.cuda.FloatTensor or "
                  "torch.FloatTensor with requires_grad=False.")
        if new_scale.device.type != self._device or new_scale.numel() != 1 or new_scale.requires_grad:
            raise AssertionError(reason)
        self._scale.copy_(new_scale)

    def get_scale(self):
        """The current scale as a Python float (1.0 when disabled)."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else self._scale.item()

    def get_growth_factor(self):
        """The factor the scale grows by."""
        return self._growth_factor

    def set_growth_factor(self, new_factor):
        """Set the factor the scale grows by."""
        self._growth_factor = new_factor

    def get_backoff_factor(self):
        """The factor the scale shrinks by after a step with infs."""
        return self._backoff_factor

    def set_backoff_factor(self, new_factor):
        """Set the factor the scale shrinks by."""
        self._backoff_factor = new_factor

    def get_growth_interval(self):
        """How many clean steps in a row make the scale grow."""
        return self._growth_interval

    def set_growth_interval(self, new_interval):
        """Set how many clean steps in a row make the scale grow."""
        self._growth_interval = new_interval

    def _get_growth_tracker(self):
        if not self._enabled:
            return 0
        return self._init_growth_tracker if self._growth_tracker is None else self._growth_tracker.item()

    def is_enabled(self):
        """Whether this scaler scales (False: everything passes through)."""
        return self._enabled

    def state_dict(self):
        """``{"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}`` as Python
        numbers (empty when disabled). Take it after `update`."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._get_growth_tracker()}

    def load_state_dict(self, state_dict):
        """Restore what `state_dict` gave (nothing when disabled)."""
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        self._init_scale = state_dict["scale"]
        if self._scale is not None:
            self._scale.fill_(state_dict["scale"])
        self._growth_factor = state_dict["growth_factor"]
        self._backoff_factor = state_dict["backoff_factor"]
        self._growth_interval = state_dict["growth_interval"]
        self._init_growth_tracker = state_dict["_growth_tracker"]
        if self._growth_tracker is not None:
            self._growth_tracker.fill_(state_dict["_growth_tracker"])
