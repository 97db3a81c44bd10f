"""A Prometheus text exposition as comparable sets: samples and family descriptions.

Imported by the metrics conformance test (project venv) and by ``vllm_metrics_driver.py``
(vLLM's venv); standard library only. What design
section 11 leaves out of the comparison is left out here: ``*_created`` samples (the time a
series was made; the text parser reads them as families of their own), the families of
the Python process (``python_*``, ``process_*``: not vLLM's), the timing histograms (wall clock),
``vllm:cache_config_info`` and the offloading connector's transfer and lookup-delay families
(``OFFLOAD_EXCLUDED``); its scheduler-side ``vllm:kv_offload_*`` families are compared.
"""

from __future__ import annotations

TIMING_FAMILIES = frozenset(
    {
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:request_time_per_output_token_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:request_inference_time_seconds",
        "vllm:request_prefill_time_seconds",
        "vllm:request_decode_time_seconds",
    }
)
# The offloading connector's families (its KVConnectorPromMetrics) that stay out: transfer
# bytes, times and sizes (and their deprecated ``transfer_type`` forms) come from the worker's
# transfer stats, which the conformance driver's played worker makes up (it moves no bytes),
# and the lookup delays are wall clock (design section 11). Counters are named without
# ``_total``, as ``parse`` names their families.
OFFLOAD_EXCLUDED = frozenset(
    {
        "vllm:kv_offload_load_bytes",
        "vllm:kv_offload_load_time",
        "vllm:kv_offload_load_size",
        "vllm:kv_offload_store_bytes",
        "vllm:kv_offload_store_time",
        "vllm:kv_offload_store_size",
        "vllm:kv_offload_total_bytes",
        "vllm:kv_offload_total_time",
        "vllm:kv_offload_size",
        "vllm:kv_offload_lookup_sync_delay_seconds",
        "vllm:kv_offload_lookup_async_delay_seconds",
    }
)
EXCLUDED_FAMILIES = TIMING_FAMILIES | {"vllm:cache_config_info"} | OFFLOAD_EXCLUDED
_HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")


def _family_of(sample_name: str, families: dict[str, list[str]]) -> str | None:
    """The family a sample line belongs to (counters: ``_total``; histograms: three suffixes)."""
    if sample_name in families:
        return sample_name
    for suffix in ("_total", *_HISTOGRAM_SUFFIXES):
        if sample_name.endswith(suffix) and sample_name[: -len(suffix)] in families:
            return sample_name[: -len(suffix)]
    return None


def _key(name: str, labels: str) -> str:
    """``name{a="x",b="y"}`` with the labels sorted (label values here hold no '",')."""
    inner = ",".join(sorted(p if p.endswith('"') else p + '"' for p in labels.split('",') if p))
    return f"{name}{{{inner}}}"


def _kept(family: str) -> bool:
    return family.startswith("vllm:") and not family.endswith("_created") and family not in EXCLUDED_FAMILIES


def parse(text: str) -> tuple[dict[str, float], dict[str, list[str]]]:
    """(samples: key -> value, families: name -> [type, help]) of prometheus_client's text
    format (version 0.0.4), exclusions applied."""
    samples: dict[str, float] = {}
    families: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, doc = line[7:].partition(" ")
            families.setdefault(name, ["", ""])[1] = doc.replace("\\n", "\n").replace("\\\\", "\\")
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            entry = families.setdefault(name, ["", ""])
            entry[0] = kind
            if kind == "counter" and name.endswith("_total"):  # 0.0.4 names a counter with _total
                families[name[: -len("_total")]] = families.pop(name)
        elif line and not line.startswith("#"):
            head, _, value = line.rpartition(" ")
            name, _, labels = head.partition("{")
            family = _family_of(name, families)
            if family is None or not _kept(family) or name.endswith("_created"):
                continue
            samples[_key(name, labels.rstrip("}"))] = float(value)
    return samples, {k: v for k, v in families.items() if _kept(k)}


def registered(text: str) -> list[str]:
    """Every ``vllm:`` family the exposition describes, exclusions not applied (counters without
    ``_total``), sorted: to check that an exclusion names only families that exist."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE vllm:"):
            name, _, kind = line[7:].partition(" ")
            if not name.endswith("_created"):  # prometheus_client's series-creation gauges
                names.add(name[: -len("_total")] if kind == "counter" and name.endswith("_total") else name)
    return sorted(names)


def deltas(texts: list[str]) -> list[dict[str, float]]:
    """Per exposition, the samples that changed (or appeared) since the one before."""
    out: list[dict[str, float]] = []
    before: dict[str, float] = {}
    for text in texts:
        now, _ = parse(text)
        out.append({k: v for k, v in now.items() if before.get(k) != v})
        before = now
    return out
