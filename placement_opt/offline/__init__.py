"""Offline data scripts: run by hand to build the shipped data, never imported at run time.

* :mod:`.fit_calibration` -- fits the cost model's parameters (``costs/calibration``'s data);
* :mod:`.convert_muxserve` -- converts MuxServe's profiling JSON into a cost table;
* :mod:`.llm_catalog` -- builds the bundled MuxServe instances;
* :mod:`.executor_calibration` -- compares executor-measured profiles with the cost model.

The import-graph test (``tests/test_architecture.py``) checks that no run-time module imports
this package.
"""
