"""Tasks in the compiled graph of a plain setitem-Laplacian CG call (30 iterations), calls 1..4, and their kinds."""
import collections, pathlib, sys
ROOT = pathlib.Path.cwd()
for p in (ROOT / "benchmarks", ROOT):
    sys.path.insert(0, str(p))
import dask, dask_gpunumeric as gnp
from dask_gpunumeric.runtime.compile import compiled_outputs
import cg_setitem
n = int(sys.argv[1]) if len(sys.argv) > 1 else 32
(b,) = dask.persist(gnp.asarray(cg_setitem.inputs(n, n)[0]))
for call in range(4):
    x = cg_setitem.cg(gnp, b)
    graph, keys = compiled_outputs([x.expr], finalized=True)
    kinds = collections.Counter(str(k[0] if isinstance(k, tuple) else k).rsplit("-", 1)[0] for k in graph.graph)
    print(call + 1, len(graph.graph), dict(kinds.most_common(8)))
    gnp.compute(x)
