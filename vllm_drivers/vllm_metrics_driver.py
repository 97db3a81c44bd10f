"""Conformance oracle for metrics: vLLM 0.31.0's Scheduler, OutputProcessor and stat loggers.

Runs inside vLLM's virtualenv, like ``vllm_sched_driver.py``, whose engine replay it extends
(never imports ``explorer``). Protocol: one normalized engine-step scenario per JSON line on
stdin, with ``"metrics": {"pace": S}``; one JSON line back: ``{"deltas": [per `step` op: the
samples that changed since the step before], "final": {"samples", "families"}, "log": {"level", "text"},
"spec_log": the SpecDecoding metrics line's {"level", "text"} or null, "registered": [every vllm:
family, exclusions not applied]}`` (samples as ``exposition_samples.py``
reads them), or ``{"error": ...}``.

What it wires, as AsyncLLM does (vllm/v1/engine/async_llm.py: add_request, abort,
output_handler): each arrival is also an ``EngineCoreRequest`` added to vLLM's own
``OutputProcessor(tokenizer=None, log_stats=True)``; an abort goes to the OutputProcessor before
the scheduler; every ``update_from_output`` result is processed by the OutputProcessor (with an
``IterationStats`` when it has outputs) and recorded by ``PrometheusStatLogger`` and
``LoggingStatLogger`` (``served_model_name = "explorer"``, engine 0). The loggers' clock is a
fake that advances ``pace`` seconds per ``step`` op (SpecDecodingLogging's too); the log line
and the SpecDecoding metrics line after it are taken from the logger's calls (level and
formatted text) after the last op.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import vllm_sched_driver as base  # noqa: E402  (redirects stdout; its protocol stream is ours)
from exposition_samples import deltas, parse, registered  # noqa: E402
from prometheus_client import REGISTRY, generate_latest  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.v1.engine import EngineCoreRequest  # noqa: E402
from vllm.v1.engine.output_processor import OutputProcessor  # noqa: E402
from vllm.v1.metrics import loggers  # noqa: E402
from vllm.v1.metrics.loggers import LoggingStatLogger, PrometheusStatLogger  # noqa: E402
from vllm.v1.metrics.stats import IterationStats  # noqa: E402
from vllm.v1.spec_decode import metrics as spec_metrics  # noqa: E402


class FakeClock:
    """Stands in for the ``time`` module inside loggers.py (it calls time.monotonic())."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


class CapturedLog:
    """Stands in for loggers.py's module logger: keeps (level, formatted message)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def info(self, fmt, *args) -> None:
        self.lines.append(("INFO", fmt % args))

    def debug(self, fmt, *args) -> None:
        self.lines.append(("DEBUG", fmt % args))

    def warning(self, fmt, *args) -> None:
        self.lines.append(("WARNING", fmt % args))


class MetricsReplay(base.EngineReplay):
    def __init__(self, scenario: dict):
        super().__init__(scenario)
        self.pace = float(scenario.get("metrics", {}).get("pace", 1.0))
        vc = base._configs().vllm(scenario["engine"])
        vc.model_config.served_model_name = "explorer"
        self.clock = FakeClock()
        loggers.time = self.clock
        spec_metrics.time = self.clock  # SpecDecodingLogging's interval, on the same clock
        self.log_capture = CapturedLog()
        loggers.logger = self.log_capture
        self.output_processor = OutputProcessor(None, log_stats=True)
        self.prom = PrometheusStatLogger(vc, [0])  # unregisters the previous scenario's metrics
        self.logging = LoggingStatLogger(vc, 0)
        self.expositions: list[str] = []
        update = self.sched.update_from_output

        def recorded_update(so, mro):
            eco = update(so, mro)
            for outputs in eco.values():
                self._frontend(outputs)
            return eco

        self.sched.update_from_output = recorded_update

    def _frontend(self, outputs) -> None:
        """AsyncLLM's output_handler for one EngineCoreOutputs."""
        iteration_stats = IterationStats() if outputs.outputs else None
        self.output_processor.process_outputs(outputs.outputs, outputs.timestamp, iteration_stats)
        self.output_processor.update_scheduler_stats(outputs.scheduler_stats)
        for logger in (self.prom, self.logging):
            logger.record(scheduler_stats=outputs.scheduler_stats, iteration_stats=iteration_stats, engine_idx=0)

    def _scraped(self) -> None:
        self.expositions.append(generate_latest(REGISTRY).decode("utf-8"))

    def op_arrive(self, op: dict, entry: dict) -> None:
        super().op_arrive(op, entry)
        prompt = [int(t) for t in op["prompt"]]
        params = SamplingParams(
            max_tokens=len(op["output"]),
            ignore_eos=True,
            prompt_logprobs=1 if op.get("prompt_logprobs") else None,
        )
        request = EngineCoreRequest(
            request_id=op["id"],
            prompt_token_ids=prompt,
            mm_features=None,
            sampling_params=params,
            pooling_params=None,
            arrival_time=float(self.arrivals),
            lora_request=None,
            cache_salt=op.get("cache_salt"),
            data_parallel_rank=None,
            external_req_id=op["id"],
        )
        self.output_processor.add_request(request, None)

    def op_step(self, op: dict, entry: dict) -> None:
        self.clock.now += self.pace
        super().op_step(op, entry)
        self._scraped()

    def op_abort(self, op: dict, entry: dict) -> None:
        self.output_processor.abort_requests([op["id"]], internal=True)  # AsyncLLM.abort: frontend first
        super().op_abort(op, entry)

    def metrics(self, ops: list[dict]) -> dict:
        self.run(ops)
        self.log_capture.lines.clear()
        self.logging.log()
        level, text = self.log_capture.lines[0]
        spec = [(lv, t) for lv, t in self.log_capture.lines[1:] if t.startswith("SpecDecoding metrics: ")]
        final = generate_latest(REGISTRY).decode("utf-8")
        samples, families = parse(final)
        return {
            "deltas": deltas(self.expositions),
            "final": {"samples": samples, "families": families},
            "log": {"level": level, "text": text},
            "spec_log": {"level": spec[0][0], "text": spec[0][1]} if spec else None,
            "registered": registered(final),
        }


def main() -> int:
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            result = MetricsReplay(json.loads(line)).metrics(json.loads(line)["ops"])
        except base.ScenarioError as exc:
            result = {"error": str(exc)}
        except Exception as exc:  # one bad scenario must not end the process
            result = {"error": f"{type(exc).__name__}: {exc}"}
        base._PROTOCOL_OUT.write(json.dumps(result, separators=(",", ":")) + "\n")
        base._PROTOCOL_OUT.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
