"""Search spaces of the placement search, as first-class objects.

Each space enumerates lazily (iterate it) and counts itself without enumerating
(``count()``), and reports what its pruning removed (``count_unpruned()``), so users
(``placeopt space INSTANCE``) and tests can see how large a space is:

* :class:`GroupPartitions` -- a device bucket split into equal-size groups plus a remainder
  group, respecting node boundaries;
* :class:`ParallelConfigs` -- (pp, tp) configurations of one group size for a set of models;
* :class:`ModelBuckets` -- partitions of the models into buckets of similar latency;
* :class:`DeviceBuckets` -- device counts per model bucket, pruned by load balance;
* :class:`ModelSelections` -- which models every group of a partition holds (memory-feasible);
* :func:`summarize` -- the whole AlpaServe (Algorithm 2) space of an instance.
"""

from placement_opt.spaces.buckets import DeviceBuckets, ModelBuckets, model_loads
from placement_opt.spaces.configs import ParallelConfigs
from placement_opt.spaces.partitions import GroupPartitions, allocate_devices, valid_group_size
from placement_opt.spaces.selections import ModelSelections
from placement_opt.spaces.summary import SearchSettings, summarize

__all__ = ["DeviceBuckets", "GroupPartitions", "ModelBuckets", "ModelSelections", "ParallelConfigs",
           "SearchSettings", "allocate_devices", "model_loads", "summarize", "valid_group_size"]
