"""Findings -> queued remedies."""

from analyzers.findings import Finding
from tuner.guidance import plan_round


def _f(id, speedup, changes, severity=None):
    f = Finding(id=id, title=id, step_fraction=0.3, speedup=speedup, evidence=[], remedy="",
                config_changes=changes)
    if severity:
        f.severity = severity
    return f


def test_each_medium_or_high_finding_alone_then_all_together():
    plan = plan_round([_f("input_preprocessing", 3.0, {"compression": "none"}),
                       _f("collective_overhead", 1.1, {"devices": 2}),
                       _f("convert_to_tensor_gaps", 1.02, {"cast": "pipeline"})], 0, "x")
    assert [r.finding_ids for r in plan.remedies] == [
        ["input_preprocessing"], ["collective_overhead"],
        ["input_preprocessing", "collective_overhead", "convert_to_tensor_gaps"]]
    assert plan.remedies[-1].changes == {"compression": "none", "devices": 2, "cast": "pipeline"}


def test_a_conflict_goes_to_the_larger_estimated_gain():
    plan = plan_round([_f("io_stall", 1.5, {"cycle_length": 16}),
                       _f("input_preprocessing", 2.0, {"cycle_length": 4, "prefetch": 2})], 0, "")
    assert plan.remedies[-1].changes == {"cycle_length": 4, "prefetch": 2}


def test_a_single_low_finding_is_still_tried():
    plan = plan_round([_f("serialized_h2d", 1.01, {"input_copy": "distributed"})], 3, "")
    assert [r.finding_ids for r in plan.remedies] == [["serialized_h2d"]]


def test_no_findings_or_no_changes_queue_nothing():
    assert plan_round([], 0, "").remedies == []
    plan = plan_round([_f("dstate_threads", 1.3, {})], 0, "")
    assert plan.remedies == [] and "no finding with a configuration change" in plan.note


def test_larger_batch_once_no_finding_is_medium_or_high():
    from tuner.guidance import add_larger_batch

    plan = plan_round([_f("kernel_launch_overhead", 1.04, {"xla": True}),
                       _f("collective_overhead", 1.01, {"devices": 2})], 3, "")
    add_larger_batch(plan, 4096, [2048, 4096, 8192, 16384])
    last = plan.remedies[-1]
    assert last.changes == {"xla": True, "devices": 2, "batch_size": 8192}
    assert last.source == "seed000:larger_batch+kernel_launch_overhead+collective_overhead"


def test_no_larger_batch_while_a_bottleneck_is_named_or_at_the_top():
    from tuner.guidance import add_larger_batch

    plan = plan_round([_f("input_preprocessing", 3.0, {"compression": "none"})], 0, "")
    add_larger_batch(plan, 4096, [4096, 8192])
    assert all("larger_batch" not in r.source for r in plan.remedies)
    plan = plan_round([], 0, "")
    add_larger_batch(plan, 8192, [4096, 8192])
    assert plan.remedies == []
    add_larger_batch(plan, 4096, [4096, 8192])
    assert plan.remedies[0].source == "seed000:larger_batch"
    assert plan.remedies[0].changes == {"batch_size": 8192}
