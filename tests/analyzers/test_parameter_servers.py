"""Parameter-server jobs: the hosts' roles from the sends' rendezvous keys, `parameter_server_wait`
and the coordinator-bound form of `per_step_overhead` (code-built traces laid out as TF 2.21's
ParameterServerStrategy writes them: a `localhost_<port>.xplane.pb` per worker and server; each
worker runs its step as an RPC `EagerService:Enqueue` holding the function call, the servers
run their partition of it on their own executor threads; docs/trace-signals.md, "Parameter
servers")."""

from __future__ import annotations

import pytest

from analyzers.report import analyze, render_text
from tests.analyzers.test_detectors import by_id
from tests.analyzers.traces import MS
from tests.analyzers.xspace_builder import Ref, XSpaceBuilder

STEP = 100  # ms
FN = "__inference_step_7"


def _device(job: str, task: int) -> str:
    return f"/job:{job}/replica:0/task:{task}/device:CPU:0"


def _key(src: str, dst: str, edge: str) -> Ref:
    return Ref(f"{src};3f2a9c;{dst};{edge};0:0")


def _job(tmp_path, *, workers: int = 2, servers: int = 1, call_ms: float = 98,
         compute_ms: float = 30, wait_ms: float = 60, server_ms=None, dense: bool = False,
         turns: bool = False, scope: str = "", steps: int = 8, machines: bool = False,
         ragged: bool = False, gpu: bool = False, evaluator: bool = False,
         two_rpc_threads: bool = False, mlp_on_servers: bool = False) -> None:
    """Each worker's step is a function call of `call_ms` in every 100 ms: `compute_ms` of its
    own ops, a send of its gradients to every server, then nothing of its own running until the
    call ends while the servers update. Server s runs ops `server_ms[s]` ms of the step
    (`wait_ms` by default): whole-table `AssignSubVariableOp`s when `dense`, else row scatters;
    each also looks rows up (1 ms) and sends them at the start of the call.
    `dense` without a `scope`: the worker densifies by hand after its compute, a 2 ms
    `UnsortedSegmentSum` then a 5 ms `mul_2` (`lr * g`) whose output it sends, 6 ms a send;
    with a `scope` (an optimizer's), the servers densify. `ragged`: a 0.1 ms
    `UnsortedSegmentSum` of the worker's own model (a ragged sum) in every step. `turns`: the
    workers' calls alternate instead of running together (the coordinator fetches each step's
    result). `gpu`: each worker has a GPU plane with a kernel per step (no `tf_op` stat).
    `evaluator`: a third job's host that reads the variables and runs no step function.
    `two_rpc_threads`: the coordinator's calls land on two RPC threads in turn, three steps on
    one, then three on the other (a real worker's alternate so). `mlp_on_servers`: the servers'
    update is a dense layer's Adam (`adam/Mul`, whole-variable but no table). The
    files are named as the profiler client names them, `localhost_<port>`, or, with
    `machines`, one machine each."""
    server_ms = [wait_ms] * servers if server_ms is None else server_ms
    names = [f"w{i}" for i in range(workers)] + [f"ps{s}" for s in range(servers)]
    space = {name: XSpaceBuilder() for name in names + (["eval"] if evaluator else [])}
    by_hand = dense and not scope
    for i in range(workers):
        me = _device("worker", i)
        host = space[f"w{i}"].plane("/host:CPU")
        rpcs = [host.line("tf_Compute/100", line_id=100), host.line("tf_Compute/103", line_id=103)]
        ex = host.line("tf_Compute/101", line_id=101)
        for k in range(steps):
            rpc = rpcs[k // 3 % 2 if two_rpc_threads else 0]
            t0 = k * STEP * MS + (i * STEP * MS // 2 if turns else 0)
            call = int((call_ms / 2 if turns else call_ms) * MS)
            c0 = t0 + MS // 2
            rpc.event("EagerService:Enqueue", c0 - 10_000, call + 20_000)
            rpc.event(f"EagerLocalExecute: {FN}", c0, call)
            rpc.event("EagerKernelExecute", c0 + 5_000, call - 10_000)
            own = int((compute_ms / 2 if turns else compute_ms) * MS)
            ex.event("matmul:_MklMatMul", c0 + MS, own - MS)
            if ragged:
                ex.event("RaggedReduceSum/UnsortedSegmentSum:UnsortedSegmentSum",
                         c0 + own - MS // 2, 100_000)
            if gpu:
                space[f"w{i}"].plane("/device:GPU:0").line("Stream #7(Kernel)", line_id=7).event(
                    "volta_sgemm_128x64_nn", c0 + MS, own - MS, correlation_id=k + 1)
            sent = own
            if by_hand:
                grad = host.line("tf_Compute/102", line_id=102)
                grad.event("UnsortedSegmentSum_2:UnsortedSegmentSum", c0 + own, 2 * MS)
                grad.event("mul_2:Mul", c0 + own + 2 * MS, 5 * MS)
                sent += 7 * MS
            if not servers:  # workers of a multi-worker job exchange with each other
                ex.event("mul_2/_55:_Send", c0 + sent, 50_000,
                         key=_key(me, _device("worker", (i + 1) % workers), "edge_246_mul_2"))
            send = 6 * MS if dense else 50_000  # a dense gradient is table-sized
            for s in range(servers):
                ex.event("mul_2/_55:_Send", c0 + sent, send,
                         key=_key(me, _device("ps", s), f"edge_246_mul_2_{s}"))
            for s in range(servers):
                ps = space[f"ps{s}"].plane("/host:CPU").line("tf_Compute/200", line_id=200)
                ps.event("embedding_lookup:ResourceGather", c0 + 10_000, MS)
                ps.event("embedding_lookup/_3:_Send", c0 + MS + 20_000, 50_000,
                         key=_key(_device("ps", s), me, "edge_107_embedding_lookup"))
                busy = int((server_ms[s] / 2 if turns else server_ms[s]) * MS)
                update = (f"{scope}AssignSubVariableOp_2:AssignSubVariableOp" if dense
                          else "adam/Mul_3:Mul" if mlp_on_servers
                          else f"{scope}ResourceScatterSub:ResourceScatterSub")
                ps.event(update, c0 + sent + send + 100_000, busy - send - 200_000)
                if dense and scope:
                    ps.event(f"{scope}UnsortedSegmentSum_2:UnsortedSegmentSum",
                             c0 + own + busy - 100_000, 50_000)
    if evaluator:
        line = space["eval"].plane("/host:CPU").line("tf_Compute/300", line_id=300)
        for k in range(steps):
            line.event("eval_read/_1:_Send", k * STEP * MS + MS, 50_000, key=_key(
                _device("evaluator", 0), _device("ps", 0), "edge_1_eval_read"))
    for k, name in enumerate(space):
        space[name].write(tmp_path, host=f"{name}.cluster_2222" if machines
                          else f"localhost_{4000 + k}")


def _report(tmp_path):
    r = analyze(tmp_path)
    return r, by_id(r)


def test_roles_come_from_the_rendezvous_keys(tmp_path):
    _job(tmp_path, servers=2, wait_ms=10)
    r, _ = _report(tmp_path)
    assert r.ctx.host_roles == {"ps": 2, "worker": 2}
    assert sorted(r.ctx.ps_hosts) == ["localhost_4002", "localhost_4003"]
    assert r.ctx.host_tasks["localhost_4001"] == ("worker", 1)
    assert r.to_dict()["hardware"]["devices"] == 2  # servers hold no replica
    assert "4 hosts (2 ps, 2 worker)" in render_text(r)


def test_dense_updates_on_the_server(tmp_path):
    """The worker computes 29 ms, densifies its gradient by hand (a 2 ms UnsortedSegmentSum, a
    5 ms `lr * g`), sends it, and waits for the server's dense update until its 98 ms call ends.
    A sparse step keeps three times the server's 1 ms of row lookups; the UnsortedSegmentSum
    goes; the `lr * g` is not attributed (the trace does not say what consumes the dense
    tensor)."""
    _job(tmp_path, dense=True)
    r, found = _report(tmp_path)
    f = found["parameter_server_wait"]
    assert f.numbers["cause"] == "dense_updates" and f.severity == "high"
    wait = f.numbers["wait_fraction"]
    assert wait == pytest.approx(0.62, abs=0.005)  # the 98 ms call less 36 ms of its own ops
    assert f.numbers["row_ops_in_calls"] == pytest.approx(1 / 98, abs=0.002)
    assert f.numbers["worker_densify_fraction"] == pytest.approx(0.02, abs=0.001)
    assert f.speedup == pytest.approx(1 / (1 - (wait - 3 * 0.01 + 0.02)), rel=0.01)
    assert f.top_events[0]["name"] == "AssignSubVariableOp_2:AssignSubVariableOp"
    assert "ps:0 (localhost_4002)" in f.evidence[1]
    assert "8 UnsortedSegmentSum on the worker and 0 on the servers" in f.evidence[2]
    assert "scatter_sub" in f.remedy
    assert "collective_overhead" not in found  # the sends are the servers' exchange


def test_an_optimizer_on_the_servers_is_counted_once(tmp_path):
    """A Keras 3 Adam on a table under ParameterServerStrategy runs on the server: its dense
    ops are the wait the worker pays, not a second saving of `dense_embedding_update`."""
    _job(tmp_path, dense=True, scope="adam/")
    _, found = _report(tmp_path)
    f = found["parameter_server_wait"]
    assert f.numbers["cause"] == "dense_updates" and f.numbers["worker_densify_fraction"] == 0
    assert "0 UnsortedSegmentSum on the worker and 16 on the servers" in f.evidence[2]
    assert "dense_embedding_update" not in found


def test_gpu_workers(tmp_path):
    """Workers with a GPU plane whose kernels carry no tf_op stat: the kernels are the
    worker's own work, and the report is built (dense_embedding_update reads no kernels)."""
    _job(tmp_path, dense=True, scope="adam/", gpu=True)
    _, found = _report(tmp_path)
    assert found["parameter_server_wait"].numbers["cause"] == "dense_updates"
    assert "dense_embedding_update" not in found


def test_sparse_round_trips_estimate_nothing(tmp_path):
    """A sparse job waits for its lookups and scatters: the finding reports the wait, low, with
    no saving; nothing else reaches medium."""
    _job(tmp_path, compute_ms=80, wait_ms=15, server_ms=[4])
    r, found = _report(tmp_path)
    f = found["parameter_server_wait"]
    assert f.numbers["cause"] == "transfer" and f.severity == "low" and f.speedup == 1.0
    busy = f.numbers["server_busy_in_calls"]["ps:0 (localhost_4002)"]
    assert busy == pytest.approx(5 / 98, abs=0.01)
    assert not [x.id for x in r.findings if x.severity in ("high", "medium")]


def test_a_sum_in_the_model_is_no_dense_update(tmp_path):
    """A 0.1 ms UnsortedSegmentSum of the worker's own model (a ragged sum) beside a sparse
    job's scatters: the servers do row work, so no dense-update saving."""
    _job(tmp_path, compute_ms=80, wait_ms=15, server_ms=[4], ragged=True)
    f = _report(tmp_path)[1]["parameter_server_wait"]
    assert f.numbers["cause"] == "transfer" and f.speedup == 1.0


def test_a_dense_layers_optimizer_is_no_dense_table_update(tmp_path):
    """The servers spend the wait in a dense layer's Adam (whole-variable, but no table: no
    optimizer densifies, no update scope holds row ops), beside a ragged sum on the worker."""
    _job(tmp_path, compute_ms=70, wait_ms=25, ragged=True, mlp_on_servers=True)
    f = _report(tmp_path)[1]["parameter_server_wait"]
    assert f.numbers["cause"] == "servers_busy" and f.speedup == 1.0


def test_calls_on_two_rpc_threads(tmp_path):
    """A worker's calls alternate between two RPC threads: every call counts, on either, for
    the wait and for the time between calls (the other thread's calls are not overhead)."""
    _job(tmp_path, dense=True, two_rpc_threads=True, steps=12)
    r, found = _report(tmp_path)
    assert len(r.ctx.call_threads) == 2
    assert found["parameter_server_wait"].numbers["wait_fraction"] == pytest.approx(0.62, abs=0.01)
    assert "per_step_overhead" not in found and "kernel_launch_overhead" not in found


def test_no_wait_no_finding(tmp_path):
    """The worker's own ops fill its calls but 2 ms of each 100 ms step: below MIN_SHARE."""
    _job(tmp_path, compute_ms=96, wait_ms=2, server_ms=[1])
    r, found = _report(tmp_path)
    assert "parameter_server_wait" not in found and r.to_dict()["warnings"] == []


def test_busy_servers_estimate_nothing(tmp_path):
    _job(tmp_path, compute_ms=70, wait_ms=25)
    f = _report(tmp_path)[1]["parameter_server_wait"]
    assert f.numbers["cause"] == "servers_busy" and f.speedup == 1.0


def test_one_server_busier_than_the_other(tmp_path):
    """Two servers on machines of their own: one runs ops 61 ms of each step, the other 11 ms.
    Balanced, each would be busy their mean (36 ms): the busiest one's excess, 25 ms of the
    100 ms step, is saved."""
    _job(tmp_path, servers=2, server_ms=[60, 10], machines=True)
    f = _report(tmp_path)[1]["parameter_server_wait"]
    assert f.numbers["cause"] == "unbalanced"
    busy = f.numbers["server_busy_in_calls"]
    hi, lo = busy["ps:0 (ps0.cluster_2222)"], busy["ps:1 (ps1.cluster_2222)"]
    assert hi > 2 * lo
    excess = (hi - (hi + lo) / 2) * 0.98  # shares of the 98 ms calls, as a share of the step
    assert excess == pytest.approx(0.25, abs=0.01)
    assert f.speedup == pytest.approx(1 / (1 - excess), rel=0.01)
    assert f.severity == "high" and "max_shards=2" in f.remedy
    assert "one machine" not in f.remedy


def test_nearly_idle_servers_are_not_unbalanced(tmp_path):
    """One server busy 3 ms, the other 1 ms, in a 62 ms wait: the wait is not theirs, so no
    partitioner is suggested and no saving estimated."""
    _job(tmp_path, servers=2, server_ms=[3, 1], machines=True)
    f = _report(tmp_path)[1]["parameter_server_wait"]
    assert f.numbers["cause"] == "transfer" and f.speedup == 1.0


def test_unbalanced_servers_sharing_one_machine(tmp_path):
    """The same servers as processes on one machine share its cores: balancing them wins
    nothing there (measured: 1.28x slower), so no saving, and the evidence says why."""
    _job(tmp_path, servers=2, server_ms=[60, 10])
    f = _report(tmp_path)[1]["parameter_server_wait"]
    assert f.numbers["cause"] == "unbalanced" and f.speedup == 1.0 and f.severity == "low"
    assert "one machine (localhost)" in f.evidence[-1]
    assert "share one machine's cores" in f.remedy


def test_no_servers_no_finding(tmp_path):
    """Two workers of a MultiWorkerMirroredStrategy job send to each other: no parameter
    server, so nothing waits for one."""
    _job(tmp_path, servers=0)
    r, found = _report(tmp_path)
    assert "parameter_server_wait" not in found
    assert r.ctx.ps_hosts == [] and r.ctx.host_roles == {"worker": 2}


def test_one_process_has_no_roles(tmp_path):
    """One process's sends between its own devices name one task (`/job:localhost/`)."""
    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    main, ex = host.line("python3", line_id=1), host.line("tf_Compute/5", line_id=5)
    for k in range(5):
        t0 = k * STEP * MS
        main.event("train", t0, STEP * MS - 1000, step_num=k, _r=1)
        ex.event("x/_1:_Send", t0 + MS, MS, key=_key(
            "/job:localhost/replica:0/task:0/device:CPU:0",
            "/job:localhost/replica:0/task:0/device:CPU:1", "edge_1_x"))
    b.write(tmp_path, host="vm")
    b.write(tmp_path, host="vm2")
    r, _ = _report(tmp_path)
    assert r.ctx.host_tasks == {} and r.to_dict()["hardware"]["host_roles"] == {}


def test_workers_taking_turns(tmp_path):
    """The coordinator fetches every step's result: one worker runs while the other waits for
    its next call. per_step_overhead names the coordinator, not Python callbacks."""
    _job(tmp_path, turns=True, wait_ms=10)
    f = _report(tmp_path)[1]["per_step_overhead"]
    assert f.numbers["workers_running_together"] == pytest.approx(0.0, abs=0.01)
    assert any("take turns" in e for e in f.evidence)
    assert "waiting for the coordinator" in f.evidence[0]
    assert "RemoteValue.fetch()" in f.remedy


def test_an_evaluator_is_no_worker_taking_turns(tmp_path):
    """One worker and an evaluator reading the variables (no step function of its own): there
    is no other worker to run together with, so nothing about turns; the remedy is still the
    coordinator's."""
    _job(tmp_path, workers=1, call_ms=70, wait_ms=10, evaluator=True)
    f = _report(tmp_path)[1]["per_step_overhead"]
    assert "workers_running_together" not in f.numbers
    assert not any("take turns" in e for e in f.evidence)
    assert "ClusterCoordinator.schedule" in f.remedy


def test_workers_running_together(tmp_path):
    _job(tmp_path, call_ms=70, wait_ms=10)
    f = _report(tmp_path)[1]["per_step_overhead"]
    assert f.numbers["workers_running_together"] == pytest.approx(1.0, abs=0.01)
    assert not any("take turns" in e for e in f.evidence)
    assert "ClusterCoordinator.schedule" in f.remedy


def test_a_job_without_step_functions_says_what_it_is(tmp_path):
    """Workers and a server whose traces hold ops and sends but no function call (TF1 workers
    running Session.run through a server): no steps, and a warning that names the job."""
    for port, job in ((5000, "worker"), (5001, "ps")):
        b = XSpaceBuilder()
        line = b.plane("/host:CPU").line("tf_Compute/5", line_id=5)
        peer = "ps" if job == "worker" else "worker"
        for k in range(5):
            line.event("matmul:_MklMatMul", k * STEP * MS, 20 * MS)
            if job == "ps":  # a server's RunGraph serves a worker's run: no step of its own
                line.event("RunGraph", k * STEP * MS, 30_000, _r=1)
            line.event("x/_1:_Send", k * STEP * MS + 21 * MS, MS,
                       key=_key(_device(job, 0), _device(peer, 0), "edge_1_x"))
        b.write(tmp_path, host=f"localhost_{port}")
    r = analyze(tmp_path)
    d = r.to_dict()
    assert not d["steps"]["found"] and d["hardware"]["host_roles"] == {"ps": 1, "worker": 1}
    assert any("distributed job's trace (1 ps, 1 worker) with no worker's steps" in w
               for w in d["warnings"])
    assert "warning: a distributed job's trace" in render_text(r)


def _tf1_job(tmp_path, optimizer: str) -> None:
    """A TF1 worker of between-graph replication: its Session.run through a server is a 40 us
    `RunGraph` on its Python thread every 60 ms, its partition's ops (20 ms) ending in a
    `RunGraphDone`; the server, on its pool threads, runs the run's `RunGraph`, looks rows up
    and applies the update: `adam`, TF1's Adam scaling its whole moment slots (`Mul`,
    `AssignVariableOp` under `Adam/update_t0/`, 30 ms) beside a 2 ms scatter of the rows;
    `adagrad`, a 2 ms `ResourceSparseApplyAdagrad`; `adagrad_mlp`, that update after the sum
    of the gradient's duplicate rows (`Unique`, `UnsortedSegmentSum` in its scope, as TF1's
    sparse updates run it), beside a dense layer's 30 ms `ResourceApplyAdagrad`
    (`adagrad_mlp_no_unique`: the sum without its `Unique`)."""
    step = 60 * MS
    worker, server = XSpaceBuilder(), XSpaceBuilder()
    py = worker.plane("/host:CPU").line("python", line_id=1)
    ex = worker.plane("/host:CPU").line("tf_Compute/11", line_id=11)
    ps = server.plane("/host:CPU").line("tf_Compute/21", line_id=21)
    me, srv = _device("worker", 0), _device("ps", 0)
    for k in range(10):
        t0 = k * step
        py.event("RunGraph", t0, 40_000, _r=1)
        ps.event("RunGraph", t0 + 100_000, 30_000, _r=1)
        ps.event("embedding_lookup:ResourceGather", t0 + 200_000, MS)
        ps.event("embedding_lookup/_3:_Send", t0 + 1_300_000, 50_000,
                 key=_key(srv, me, "edge_7_embedding_lookup"))
        ex.event("matmul:_MklMatMul", t0 + 2 * MS, 20 * MS)
        ex.event("gradients/concat_grad/Slice_S40:_Send", t0 + 22 * MS, 100_000,
                 key=_key(me, srv, "edge_9_Slice"))
        ex.event("RunGraphDone", t0 + 22 * MS + 200_000, 20_000)
        if optimizer == "adam":
            ps.event("Adam/update_t0/ResourceScatterAdd:ResourceScatterAdd", t0 + 23 * MS, 2 * MS)
            ps.event("Adam/update_t0/mul:Mul", t0 + 25 * MS, 15 * MS)
            ps.event("Adam/update_t0/Assign:AssignVariableOp", t0 + 40 * MS, 15 * MS)
        else:
            if optimizer.startswith("adagrad_mlp"):
                if optimizer == "adagrad_mlp":
                    ps.event("Adagrad/update_t0/Unique:Unique", t0 + 22_400_000, 300_000)
                ps.event("Adagrad/update_t0/UnsortedSegmentSum:UnsortedSegmentSum",
                         t0 + 22_700_000, 300_000)
                ps.event("Adagrad/update_dense/ResourceApplyAdagrad:ResourceApplyAdagrad",
                         t0 + 25 * MS, 30 * MS)
            ps.event("Adagrad/update_t0/ResourceSparseApplyAdagrad:ResourceSparseApplyAdagrad",
                     t0 + 23 * MS, 2 * MS)
    worker.write(tmp_path, host="localhost_6000")
    server.write(tmp_path, host="localhost_6001")


def test_tf1_workers_steps_are_their_session_runs(tmp_path):
    """Steps run from one RunGraph on the worker's Python thread to the next (the server's
    RunGraphs, on its pool threads, are not steps); TF1's Adam on the server updates whole
    slots while the worker waits (55 of 60 ms outside its own 20 ms of ops)."""
    _tf1_job(tmp_path, "adam")
    r, found = _report(tmp_path)
    assert r.ctx.steps.source == "session:RunGraph" and r.ctx.n_steps == 9
    assert r.ctx.step_host == "localhost_6000"
    f = found["parameter_server_wait"]
    assert f.numbers["cause"] == "dense_updates" and f.severity == "high", f.evidence
    assert f.numbers["wait_fraction"] == pytest.approx(40 / 60, abs=0.01)
    assert "lazy Adam" in f.remedy


def test_tf1_sparse_optimizer_estimates_nothing(tmp_path):
    _tf1_job(tmp_path, "adagrad")
    r, found = _report(tmp_path)
    assert r.ctx.steps.source == "session:RunGraph"
    f = found["parameter_server_wait"]
    assert f.numbers["cause"] == "transfer" and f.speedup == 1.0


def test_tf1_duplicate_row_sums_are_no_dense_update(tmp_path):
    """TF1's Adagrad sums a table gradient's duplicate rows (a `Unique`, then an
    `UnsortedSegmentSum` in the update's scope) before its row-sparse apply: no densified
    gradient, while a dense layer's update keeps the servers busy; the same sum with no `Unique`
    beside it densifies."""
    _tf1_job(tmp_path, "adagrad_mlp")
    f = _report(tmp_path)[1]["parameter_server_wait"]
    assert f.numbers["cause"] == "servers_busy" and f.speedup == 1.0, f.evidence
    _tf1_job(tmp_path / "no_unique", "adagrad_mlp_no_unique")
    f = _report(tmp_path / "no_unique")[1]["parameter_server_wait"]
    assert f.numbers["cause"] == "dense_updates" and f.speedup > 1.5, f.evidence
