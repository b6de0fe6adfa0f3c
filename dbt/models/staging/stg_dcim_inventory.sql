-- The current inventory: for each DCIM source, the rows of its latest successful collection.
-- A failed or empty collection leaves the previous one current instead of emptying the view.
with latest as (
    select source, run_id
    from (
        select source, run_id,
               row_number() over (partition by source order by max(collected_at) desc) as rn
        from {{ source('raw', 'dcim_inventory') }}
        group by source, run_id
    ) ranked
    where rn = 1
)
select
    inv.source,
    inv.node,
    inv.rack,
    inv.role,
    inv.su,
    inv.gpu_model,
    inv.gpu_count,
    inv.hca_count,
    inv.hcas,
    inv.bmc_address,
    inv.serial,
    inv.collected_at
from {{ source('raw', 'dcim_inventory') }} inv
join latest using (source, run_id)
