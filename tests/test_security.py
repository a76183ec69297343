"""Safe defaults and hostile strings: ``gnp.cluster`` listens on the loopback interface unless told otherwise,
runs over TLS with a ``distributed.security.Security``; no user-supplied string (a dtype name, a field name, a
function name) reaches generated CUDA source; nothing in the code base unpickles or evaluates data from
outside the Dask protocol."""
from __future__ import annotations

import ast
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

import dask_gpunumeric as gnp
from conftest import assert_eq
from dask_gpunumeric.runtime.cluster import bind_locally

distributed = pytest.importorskip("distributed")

ROOT = pathlib.Path(__file__).resolve().parents[1]


# --- clusters ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("given, expected", [
    ({}, {"host": "127.0.0.1", "dashboard_address": "127.0.0.1:8787"}),
    ({"dashboard_address": ":0"}, {"host": "127.0.0.1", "dashboard_address": "127.0.0.1:0"}),
    ({"dashboard_address": 8790}, {"host": "127.0.0.1", "dashboard_address": "127.0.0.1:8790"}),
    ({"dashboard_address": None}, {"host": "127.0.0.1", "dashboard_address": None}),
    # told otherwise: a host, an interface, a dashboard address with its host, several addresses
    ({"host": "0.0.0.0"}, {"host": "0.0.0.0", "dashboard_address": "0.0.0.0:8787"}),
    ({"host": "::1", "dashboard_address": ":0"}, {"host": "::1", "dashboard_address": "[::1]:0"}),
    ({"interface": "eth0"}, {"interface": "eth0"}),
    ({"dashboard_address": "10.1.2.3:9000"}, {"host": "127.0.0.1", "dashboard_address": "10.1.2.3:9000"}),
    ({"dashboard_address": ":8787,:8788"}, {"host": "127.0.0.1", "dashboard_address": ":8787,:8788"}),
])
def test_bind_locally(given, expected):
    assert bind_locally({**given, "n_workers": 3}) == {**expected, "n_workers": 3}


def _listening_hosts(server) -> set[str]:
    return {sock.getsockname()[0] for sock in server._sockets.values()}


def test_cluster_listens_on_loopback_only():
    with gnp.cluster(n_workers=1, dashboard_address=":0") as client:
        scheduler = client.cluster.scheduler
        assert distributed.comm.get_address_host(scheduler.address) == "127.0.0.1"
        assert _listening_hosts(scheduler.http_server) == {"127.0.0.1"}  # the dashboard too
        workers = client.scheduler_info(n_workers=-1)["workers"]
        assert workers and {distributed.comm.get_address_host(w) for w in workers} == {"127.0.0.1"}


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory) -> dict[str, str]:
    """A self-signed certificate and key (made with the openssl command), for every role."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "1", "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return {"cert": str(cert), "key": str(key)}


def test_cluster_over_tls(tls_files):
    from distributed.security import Security

    cert, key = tls_files["cert"], tls_files["key"]
    security = Security(tls_ca_file=cert, tls_client_cert=cert, tls_client_key=key, tls_scheduler_cert=cert,
                        tls_scheduler_key=key, tls_worker_cert=cert, tls_worker_key=key, require_encryption=True)
    with gnp.cluster(n_workers=1, dashboard_address=":0", security=security) as client:
        address = client.scheduler.address
        assert address.startswith("tls://127.0.0.1:")
        ref = np.arange(12.0)
        assert_eq(gnp.sum(gnp.from_array(ref, chunks=4) ** 2), (ref**2).sum())
        with gnp.cluster(address=address, security=security) as other:  # a second client, with the keys
            assert other.submit(sum, [1, 2]).result() == 3
        with pytest.raises((OSError, TypeError, ValueError)):  # and none without them
            distributed.Client(address.replace("tls://", "tcp://"), timeout="2s", set_as_default=False)


# --- hostile strings -----------------------------------------------------------------------------------------

PAYLOAD = '"; } extern "C" __global__ void pwned() { /* */'


def _hostile(v):
    return v * 2


_hostile.__name__ = PAYLOAD  # a NumPy ufunc made from it is named after it


def test_hostile_strings_never_reach_kernel_source():
    from dask_gpunumeric.codegen.program import kernel_source
    from dask_gpunumeric.optimize import explain_groups

    ref = np.arange(12.0)
    x = gnp.from_array(ref, chunks=5)
    # a dtype name: NumPy refuses it before anything is built
    with pytest.raises(TypeError):
        x.astype(PAYLOAD)
    with pytest.raises(TypeError):
        gnp.zeros(3, dtype=PAYLOAD)
    # text riding on a dtype (its metadata): kernels see the dtype's C type only
    tagged = np.dtype("f8", metadata={"doc": PAYLOAD})
    y = gnp.sum(gnp.exp(x.astype(tagged)) * 2 + 1)
    assert_eq(y, (np.exp(ref) * 2 + 1).sum())
    # a field name: structured data is indexed like any other, and never fused (on NumPy blocks: CuPy
    # has no packed structured dtypes)
    fields = np.zeros(4, dtype=[(PAYLOAD, "f8"), ("b", "i4")])
    s = gnp.asarray(fields, chunks=3, device="cpu")
    assert_eq(s[::-2], fields[::-2])
    # a function name: a ufunc of ours is looked up in our tables; another one runs through dask.array
    hostile = np.frompyfunc(_hostile, 1, 1)  # a Python-object ufunc: NumPy blocks only
    with pytest.warns(gnp.FallbackWarning):
        z = hostile(gnp.from_array(ref, chunks=5, backend="numpy"))
    np.testing.assert_array_equal(np.asarray(z, dtype=float), ref * 2)
    sources = [kernel_source(group.operand("program"), mode, 1)[0]
               for array in (y, s[::-2], z) for group in explain_groups(array.expr) for mode in ("flat", "strided")]
    assert sources and not any(PAYLOAD in src or "pwned" in src for src in sources)


@pytest.mark.parametrize("forge", ["op", "dtype", "reduction", "random", "slot"])
def test_forged_programs_are_refused(forge):
    """Programs come from our fusion pass; one forged with other names or non-integer slots does not become
    source, whatever it carries."""
    from dask_gpunumeric.codegen import program as _codegen

    from dask_gpunumeric.optimize import explain_groups

    x = gnp.arange(12.0, chunks=5)
    (group,) = explain_groups(gnp.sum(gnp.exp(x) + gnp.random.default_rng(0).random(12, chunks=5)).expr)
    ndim, inputs, instrs, outputs = group.operand("program")
    instrs = list(instrs)
    k = {"op": next(i for i, ins in enumerate(instrs) if ins[0] == "op"),
         "random": next(i for i, ins in enumerate(instrs) if ins[0] == "random")}
    if forge == "op":
        ins = instrs[k["op"]]
        instrs[k["op"]] = (ins[0], PAYLOAD, *ins[2:])
    elif forge == "dtype":
        ins = instrs[k["op"]]
        instrs[k["op"]] = (ins[0], ins[1], PAYLOAD, *ins[3:])
    elif forge == "random":
        ins = instrs[k["random"]]
        instrs[k["random"]] = (ins[0], PAYLOAD, *ins[2:])
    elif forge == "slot":
        ins = instrs[k["random"]]
        instrs[k["random"]] = (*ins[:3], PAYLOAD, *ins[4:])
    else:
        outputs = tuple(o._replace(kind=PAYLOAD) if o.tag == "reduce" else o for o in outputs)
    with pytest.raises(ValueError, match="not a program of ours"):
        _codegen.kernel_source((ndim, inputs, tuple(instrs), outputs), "flat", 1)


@pytest.mark.parametrize("forge", ["kind", "value", "axes", "keepdims"])
def test_forged_totals_are_refused(forge):
    """A total (a one-block array's reduction finished in its kernel) forged: another reduction name, a
    value not before it, not every axis, a keepdims flag that is not a bool."""
    from dask_gpunumeric.codegen import program as _codegen
    from dask_gpunumeric.optimize import explain_groups

    (group,) = explain_groups((gnp.sum(gnp.exp(gnp.arange(12.0))) * 2).expr)
    ndim, inputs, instrs, outputs = group.operand("program")
    j = next(i for i, ins in enumerate(instrs) if ins[0] == "total")
    _codegen.kernel_source((ndim, inputs, instrs, outputs), "flat", 1)  # as made: fine
    total = instrs[j]._replace(**{forge: {"kind": PAYLOAD, "value": j, "axes": (), "keepdims": PAYLOAD}[forge]})
    forged = (*instrs[:j], total, *instrs[j + 1:])
    with pytest.raises(ValueError, match="not a program of ours"):
        _codegen.kernel_source((ndim, inputs, forged, outputs), "flat", 1)


@pytest.mark.parametrize("forge", ["offset", "slot", "dtype", "index type", "program"])
def test_forged_stencil_code_is_refused(forge):
    """The same for the kernels of stencil groups: a sweep's code from the stencil pass, forged."""
    from dask_gpunumeric.codegen import stencil as _stencil_source
    from dask_gpunumeric.api.explain import plan

    u = gnp.from_array(np.zeros((8, 8)), chunks=4)
    step = u + 0.1 * (gnp.roll(u, 1, axis=0) + gnp.roll(u, -1, axis=0) - 2 * u)
    code = plan(step)["stencils"][0]["plan"].sweeps[0].code
    _stencil_source.kernel_source(code)  # as made: fine
    program, dtypes, loads, restricted, bases, out_dtypes = code
    index = "int"
    if forge == "offset":
        loads = ((loads[0][0], (PAYLOAD, 0)), *loads[1:])
    elif forge == "slot":
        loads = ((PAYLOAD, loads[0][1]), *loads[1:])
    elif forge == "dtype":
        out_dtypes = (PAYLOAD,)
    elif forge == "index type":
        index = PAYLOAD
    else:
        program = (program[0], program[1], ((program[2][0][0], program[2][0][1], PAYLOAD),) + program[2][1:],
                   program[3])
    with pytest.raises(ValueError, match="not a program of ours"):
        _stencil_source.kernel_source((program, dtypes, loads, restricted, bases, out_dtypes), index)


# --- no unpickling, no eval ----------------------------------------------------------------------------------

_UNSAFE_MODULES = {"pickle", "cloudpickle", "dill", "marshal", "shelve", "jsonpickle", "joblib"}
_UNSAFE_CALLS = {"eval", "exec", "compile"}  # the builtins


def _unsafe_uses(path: pathlib.Path) -> list[str]:
    """Imports of unpickling modules, eval/exec-style calls, and ``numpy.load(..., allow_pickle=True)``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            found += [f"{where} import {a.name}" for a in node.names if a.name.split(".")[0] in _UNSAFE_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in _UNSAFE_MODULES:
            found.append(f"{where} from {node.module} import")
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id in _UNSAFE_CALLS:
                found.append(f"{where} {node.func.id}()")
            if any(k.arg == "allow_pickle" for k in node.keywords):
                found.append(f"{where} allow_pickle=")
    return found


def test_no_unpickling_or_eval_in_the_code_base():
    files = [p for folder in ("dask_gpunumeric", "benchmarks", "examples", "ci")
             for p in sorted((ROOT / folder).rglob("*.py"))]
    assert any(p.name == "program.py" for p in files)
    found = [use for p in files for use in _unsafe_uses(p)]
    assert found == [], "data from outside the Dask protocol must not be unpickled or evaluated: " + ", ".join(found)
