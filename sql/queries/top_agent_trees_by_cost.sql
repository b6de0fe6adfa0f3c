-- The agent trees (root id) that cost the most this month (UTC), allocation basis.
-- Live per-tree state (live pods, burn rate) is in agents.tree_usage, for the budget controller.
-- Reads finops.agent_tree_pods_monthly (one row per pod, tree and month, so a tree's pods are a
-- count of rows); the same question straight off finops.gpu_cost_hourly is
-- from_fact/top_agent_trees_by_cost.sql, same answer.
with params as (
    select date_trunc(
        'month', coalesce(nullif(current_setting('gpufabric.as_of', true), '')::timestamptz, now()), 'UTC'
    ) as month_start
)
select
    t.root_id,
    min(t.client) as client,
    count(t.resource_id) as pods,
    max(t.max_depth) as max_depth,
    sum(t.gpu_hours) as gpu_hours,
    sum(t.effective_cost_usd) as effective_cost_usd,
    min(t.first_hour) as first_hour,
    max(t.last_hour) as last_hour
from finops.agent_tree_pods_monthly as t
cross join params as p
where t.month = p.month_start
  and t.root_id <> 'unattributed'
group by 1
order by effective_cost_usd desc nulls last, root_id
limit 20
