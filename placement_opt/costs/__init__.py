"""Cost layer: what a model costs on given hardware, measured or predicted.

* :mod:`.costmodel` -- the analytic per-operator cost model of the auto-parallelizer;
* :mod:`.calibration` -- its fitted parameters per GPU (shipped data; the fit itself is
  offline: :mod:`placement_opt.offline.fit_calibration`);
* :mod:`.costtable` -- measured LLM prefill/decode latency tables and their lookups;
* :mod:`.roofline` -- an analytic LLM cost table from the architecture when none was measured;
* :mod:`.interp` -- the Numba interpolation kernels the tables, the LLM simulator and the
  estimator share.
"""
