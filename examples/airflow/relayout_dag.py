"""Airflow DAG: relayout as plan -> key tasks -> merge -> map tasks -> detect tasks ->
reduce tasks -> commit, each a pod.

The plan task (plan --key-tasks) pins the inputs and options and pushes its JSON line
({"keys", "key_tasks"}) to XCom (relayout writes it to /airflow/xcom/return.json); the key
tasks read the key columns of one input range each; the merge (plan --keys) pushes
{"plan", "map_tasks", "detect_tasks", "reduce_tasks"}; the keys, map, detect and reduce
steps are dynamically mapped with .expand() over range(key_tasks) and so on. Only a
packed plan (QUERY_KEY set) has detect tasks; with none, Airflow skips the empty
expansion, so reduce runs on trigger_rule="none_failed".
Retries: Airflow retries every failure; exit codes 2, 3 and 5 (usage, bad input,
precondition) fail again the same way, so only transient errors (4) are worth the wait.

The commands are module-level lists so that cmd/relayout/examples_test.go can read
them (with Python's ast, without Airflow) and run them as local processes.
"""

import os

INPUT = "s3://bucket/impressions/"
OUTPUT = "s3://bucket/relaid/"
# The store's URL query, appended to every URL: empty for AWS S3, GCS and Azure;
# "?endpoint=http://minio:9000&use_path_style=true" for MinIO or another S3-protocol store.
STORE_QUERY = os.environ.get("RELAYOUT_STORE_QUERY", "")
PLAN = OUTPUT + "_relayout/plan.json" + STORE_QUERY
KEYS = OUTPUT + "_relayout/keys.json" + STORE_QUERY
QUERY_KEY = ""  # e.g. "query_id" to pack queries

PLAN_ARGS = ["plan", "--key-tasks", "--input", INPUT + STORE_QUERY, "--output", OUTPUT + STORE_QUERY, "--slice-keys", "country,date",
             "--query-key", QUERY_KEY,
             "--memory-limit", "6GiB",  # units sized for the detect and reduce pods
             "--overwrite", "--report-json", "/airflow/xcom/return.json"]
KEYS_ARGS = ["keys", "--keys", KEYS, "--task"]
MERGE_ARGS = ["plan", "--keys", KEYS, "--report-json", "/airflow/xcom/return.json"]
MAP_ARGS = ["map", "--plan", PLAN, "--memory-limit", "3GiB", "--task"]
DETECT_ARGS = ["detect", "--plan", PLAN, "--memory-limit", "6GiB", "--task"]
REDUCE_ARGS = ["reduce", "--plan", PLAN, "--memory-limit", "6GiB", "--task"]
COMMIT_ARGS = ["commit", "--plan", PLAN]

try:  # the DAG itself; the test reads only the lists above
    import pendulum
    from airflow.decorators import task
    from airflow.models.dag import DAG
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    IMAGE = "registry.example.com/relayout:0.1.0"  # what `make image` builds; push it to your registry (README)

    with DAG("relayout", schedule="@daily", start_date=pendulum.datetime(2026, 1, 1), catchup=False) as dag:
        plan = KubernetesPodOperator(task_id="plan", name="relayout-plan", image=IMAGE,
                                     cmds=["relayout"], arguments=PLAN_ARGS, do_xcom_push=True, retries=3)

        @task
        def key_tasks(k):
            return [KEYS_ARGS + [str(i)] for i in range(k["key_tasks"])]

        keys = KubernetesPodOperator.partial(task_id="keys", name="relayout-keys", image=IMAGE, cmds=["relayout"],
                                             max_active_tis_per_dag=16, retries=3).expand(arguments=key_tasks(plan.output))
        merge = KubernetesPodOperator(task_id="merge", name="relayout-merge", image=IMAGE,
                                      cmds=["relayout"], arguments=MERGE_ARGS, do_xcom_push=True, retries=3)

        @task
        def map_tasks(p):
            return [MAP_ARGS + [str(i)] for i in range(p["map_tasks"])]

        @task
        def detect_tasks(p):
            return [DETECT_ARGS + [str(i)] for i in range(p["detect_tasks"])]

        @task
        def reduce_tasks(p):
            return [REDUCE_ARGS + [str(i)] for i in range(p["reduce_tasks"])]

        maps = KubernetesPodOperator.partial(task_id="map", name="relayout-map", image=IMAGE, cmds=["relayout"],
                                             max_active_tis_per_dag=16, retries=3).expand(arguments=map_tasks(merge.output))
        detects = KubernetesPodOperator.partial(task_id="detect", name="relayout-detect", image=IMAGE, cmds=["relayout"],
                                                max_active_tis_per_dag=16, retries=3).expand(arguments=detect_tasks(merge.output))
        reduces = KubernetesPodOperator.partial(task_id="reduce", name="relayout-reduce", image=IMAGE, cmds=["relayout"],
                                                max_active_tis_per_dag=16, retries=3,
                                                trigger_rule="none_failed").expand(arguments=reduce_tasks(merge.output))
        commit = KubernetesPodOperator(task_id="commit", name="relayout-commit", image=IMAGE,
                                       cmds=["relayout"], arguments=COMMIT_ARGS, retries=3)
        plan >> keys >> merge >> maps >> detects >> reduces >> commit
except ImportError:
    pass
