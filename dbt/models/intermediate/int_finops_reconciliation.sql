-- Per node, hour and cost basis: capacity against the lines of the cost fact. `balanced` is the
-- fact's invariant (workload + idle = capacity, exactly); `idle_nonnegative` fails when pods held
-- more GPUs than the node reported (a stale node snapshot, or an over-request).
select
    "x_Cluster" as cluster,
    "x_Node" as node,
    "ChargePeriodStart" as hour,
    "x_CostBasis" as basis,
    max("x_CapacityGpuHours") as capacity,
    coalesce(sum("ConsumedQuantity") filter (where "x_LineType" = 'workload'), 0) as workload_quantity,
    coalesce(sum("ConsumedQuantity") filter (where "x_LineType" = 'idle'), 0) as idle_quantity,
    coalesce(sum("ConsumedQuantity") filter (where "x_LineType" = 'workload'), 0)
    + coalesce(sum("ConsumedQuantity") filter (where "x_LineType" = 'idle'), 0)
    = coalesce(max("x_CapacityGpuHours"), 0) as balanced,
    coalesce(min("ConsumedQuantity") filter (where "x_LineType" = 'idle'), 0) >= 0 as idle_nonnegative
from {{ ref('gpu_cost_hourly') }}
group by 1, 2, 3, 4
