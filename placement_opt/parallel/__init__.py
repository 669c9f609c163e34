"""Auto-parallelization (AlpaServe section 4.1): cost model, intra-op ILP, inter-op DP.

Entry points::

    from placement_opt.parallel import parallelize, enumerate_parallel_configs, architecture_profile
    pm = parallelize(arch, cluster, n_gpus=8, pp=2, tp=4)   # -> ParallelizedModel
    pm.stage_latency, pm.stage_weight_bytes, pm.to_dict()["sharding"]
    configs = enumerate_parallel_configs(arch, 8, cluster)  # [(pp, tp), ...] that fit memory
    profile = architecture_profile("bert-1.3b", arch, cluster)  # placement_opt.profile.Profile
    table = inter_op_table(arch, cluster, n_gpus=16, tp=2)   # DP table: best stage count and splits

See docs/parallel.md for the cost model, its calibration and the algorithms.
"""

from placement_opt.parallel.api import (BATCH_SIZES, ParallelizedModel, architecture_profile, enumerate_parallel_configs, inter_op_table,
                  parallelize, parallelize_uniform, parallelize_with)

__all__ = ["BATCH_SIZES", "ParallelizedModel", "architecture_profile", "enumerate_parallel_configs", "inter_op_table",
           "parallelize", "parallelize_uniform", "parallelize_with"]
