{#- Fails with the duplicated keys when a combination of columns is not unique
    (the one dbt_utils test we need, without a package download). -#}
{% test unique_combination(model, columns) %}
select {{ columns | join(', ') }}, count(*) as copies
from {{ model }}
group by {{ columns | join(', ') }}
having count(*) > 1
{% endtest %}
