"""python fmadrun.py {fmad,nofmad} SCRIPT ARGS...: SCRIPT run as __main__, generated kernels compiled with
contraction (the default) or --fmad=false (the eighteenth session's options)."""
import runpy, sys
import dask_gpunumeric.kernels.cuda as cuda
if sys.argv[1] == "nofmad":
    cuda.COMPILE_OPTIONS = ("--std=c++17", "--fmad=false")
script = sys.argv[2]
sys.argv = sys.argv[2:]
sys.path.insert(0, script.rsplit("/", 1)[0])
runpy.run_path(script, run_name="__main__")
