"""Continuous batching of Transformers (`generate_batch`, the manager behind
`transformers serve --continuous-batching`) with a bounded set of programs.

Transformers prepares each continuous batch in static tensors on the model's
device: it writes the batch's token ids, positions, cache indices and a
block-diagonal attention mask into slices whose lengths are those of the
batch, request by request, and slices the static tensors to the batch's
length for the forward pass. On a CUDA device those small writes cost a
kernel launch each. Here every new length is a new program to compile: a
run of 32 requests compiled about 400 programs more the second time, with
new prompts, than the first.

Two changes make the set of programs a fixed one:

- The batch is prepared on the host. The static tensors live in CPU memory,
  where transformers fills them exactly as before; before the forward pass,
  each slice the model reads is uploaded as a new device tensor (a
  transfer, no program), and the model writes its next tokens into a new
  device tensor, which comes back whole. Transformers' asynchronous
  batching also prepares batches on the host, but is refused for devices
  other than CUDA and XPU.
- The batch is padded, as transformers pads it when it compiles the forward
  pass or captures CUDA graphs, but to powers of two: the query tokens to
  the next power of two from `q_padding_interval_size` (64 by default) up
  to `max_batch_tokens`, the cache tokens read to the next power of two from
  `kv_padding_interval_size` (16384) up to the cache's capacity,
  `max_tokens_read`. (Transformers pads to multiples of those sizes: with
  its default of 8192 batch tokens that would be 128 query sizes, each a
  compilation here, against 8.) Padding queries get an all-masked row and
  write to the cache's trash slot, so the tokens are unchanged.

The forward pass then sees one input shape per pair of padded sizes,
whatever the prompts: 1 + ceil(log2(max_batch_tokens / 64)) query sizes,
and one cache size while the cache holds at most 16384 tokens. Transformers'
warm-up (run by `generate_batch`) is extended here to run each of them once,
and on this device a new manager runs it before its first batch (the server
starts managers without it), so that nothing compiles afterwards, with one
exception: a program that writes the paged cache in place donates the
cache's old buffer when nothing else holds it, and is compiled a second
time, without donation, the first time a program launched before it (all
layers' caches are views of one tensor) still holds that buffer. That
depends on timing, not on the prompts: at most one more program per cache
write and padded size.

`install()` patches three classes when transformers' continuous batching
modules are imported (at once if they are); models on other devices run as
transformers runs them. torch_pjrt installs it when it is imported. Nothing
here changes which tokens come out (tests/hf_ecosystem/test_serving.py
compares them with the CPU's).
"""

from __future__ import annotations

from typing import Any

import torch

from ._import_hooks import when_imported
from ._settings import settings

_RUNNER = "transformers.generation.continuous_batching.model_runner"
_API = "transformers.generation.continuous_batching.continuous_api"


def _ours(device: Any) -> bool:
    return torch.device(device).type == settings().device_name


def _host_prepared_ios(base: type) -> type:
    """A subclass of transformers' ContinuousBatchingIOs that keeps its static
    tensors on the host and uploads what the model reads."""

    class HostPreparedIOs(base):
        _torch_pjrt = True

        def __init__(self, cache, config, continuous_batching_config, device, model_dtype,
                     logit_processor) -> None:
            self._target = torch.device(device) if _ours(device) else None
            host = torch.device("cpu") if self._target is not None else device
            super().__init__(cache, config, continuous_batching_config, host, model_dtype,
                             logit_processor)
            self._device_output: torch.Tensor | None = None

        def _upload(self, value: Any) -> Any:
            if isinstance(value, dict):
                return {k: self._upload(v) for k, v in value.items()}
            if isinstance(value, list):
                return [self._upload(v) for v in value]
            if isinstance(value, torch.Tensor) and value.device.type == "cpu":
                # A new device tensor from the slice's contents: a transfer,
                # not a program, so nothing here compiles or depends on what
                # still reads the previous batch's inputs.
                return value.contiguous().to(self._target)
            return value

        def get_model_kwargs(self, use_padding: bool = False):
            kwargs = super().get_model_kwargs(use_padding=use_padding)
            if self._target is None:
                return kwargs
            return {k: self._upload(v) for k, v in kwargs.items()}

        def get_cb_kwargs(self):
            if self._target is None:
                return super().get_cb_kwargs()
            # The model writes its next tokens into a fresh device tensor.
            self._device_output = torch.zeros(self.output_ids.shape, dtype=self.output_ids.dtype,
                                              device=self._target)
            return self.carry_over_ids, self._device_output, self._device_output

        def prepare_batch_update(self):
            if self._target is not None and self._device_output is not None:
                self.output_ids.copy_(self._device_output)  # one fixed-size read back
            return super().prepare_batch_update()

    HostPreparedIOs.__name__ = HostPreparedIOs.__qualname__ = f"HostPrepared{base.__name__}"
    return HostPreparedIOs


def _patch_api(module) -> None:
    ios = getattr(module, "ContinuousBatchingIOs", None)
    manager = getattr(module, "ContinuousBatchingManager", None)
    if ios is None or manager is None or not hasattr(manager, "_create_batch_processor"):
        return  # another transformers layout: leave it alone
    if getattr(ios, "_torch_pjrt", False):
        return
    module.ContinuousBatchingIOs = _host_prepared_ios(ios)
    original_create = manager._create_batch_processor

    def _create_batch_processor(self):
        # The server starts a manager without its warm-up: on this device
        # a new batch processor warms up every padded size before it runs.
        fresh = getattr(self, "batch_processor", None) is None
        processor = original_create(self)
        if fresh and _ours(self.model.device) and not self.warmed_up:
            processor.warmup(self.model)
            self.warmed_up = True
        return processor

    _create_batch_processor._torch_pjrt = True  # type: ignore[attr-defined]
    manager._create_batch_processor = _create_batch_processor


def _sizes(low: int, high: int) -> list[int]:
    """The padded sizes from `low` to `high`: powers of two, and `high`."""
    sizes, size = [], max(1, min(low, high))
    while size < high:
        sizes.append(size)
        size *= 2
    return sizes + [high]


def _patch_runner(module) -> None:
    runner = getattr(module, "ModelRunner", None)
    needed = ("pad_to_pow2", "infer_max_single_request_tokens")
    if runner is None or not hasattr(runner, "run_one_warmup") or \
            not hasattr(runner, "maybe_pad_inputs") or not all(hasattr(module, n) for n in needed):
        return  # another transformers layout: leave it alone
    if getattr(runner.__init__, "_torch_pjrt", False):
        return
    original_init, original_pad, original_warmup = (runner.__init__, runner.maybe_pad_inputs,
                                                    runner.warmup)

    def __init__(self, *args, **kwargs) -> None:
        original_init(self, *args, **kwargs)
        if _ours(self.cache.device):
            self.pad_inputs = True  # static shapes, as with compile or CUDA graphs

    def maybe_pad_inputs(self, num_q_tokens: int, max_kv_read: int,
                         use_decode_fast_path: bool) -> tuple[int, int]:
        if not _ours(self.cache.device) or use_decode_fast_path or not self.pad_inputs:
            return original_pad(self, num_q_tokens, max_kv_read, use_decode_fast_path)
        cache, config = self.cache, self.cb_config
        num_q_tokens = module.pad_to_pow2(num_q_tokens, cache.max_batch_tokens,
                                          config.q_padding_interval_size)
        max_kv_read = module.pad_to_pow2(max_kv_read, cache.max_tokens_read,
                                         config.kv_padding_interval_size)
        return num_q_tokens, max_kv_read

    @torch.no_grad()
    def warmup(self, model) -> None:
        """Transformers warms up the largest batch only (to size the CUDA
        graph pool); here every padded size is its own programs, so each is
        run once."""
        if not _ours(self.cache.device) or not self.pad_inputs:
            return original_warmup(self, model)
        if getattr(self, "_torch_pjrt_warm", False):
            return  # every size has run: the programs stay compiled
        cache, config = self.cache, self.cb_config
        longest = module.infer_max_single_request_tokens(cache)
        for num_q_tokens in _sizes(config.q_padding_interval_size, cache.max_batch_tokens):
            for max_kv_read in _sizes(config.kv_padding_interval_size, cache.max_tokens_read):
                if num_q_tokens + min(max_kv_read, config.page_size) <= longest:
                    self.run_one_warmup(model=model, num_q_tokens=num_q_tokens,
                                        max_kv_read=max_kv_read)
        cache.reset()  # the warm-up requests took sectors
        self._torch_pjrt_warm = True

    for fn in (__init__, maybe_pad_inputs, warmup):
        fn._torch_pjrt = True  # type: ignore[attr-defined]
    runner.__init__, runner.maybe_pad_inputs, runner.warmup = __init__, maybe_pad_inputs, warmup


def install() -> None:
    """Patches continuous batching when (or, if already, now that) its modules
    are imported. Idempotent."""
    when_imported(_API, _patch_api)
    when_imported(_RUNNER, _patch_runner)

