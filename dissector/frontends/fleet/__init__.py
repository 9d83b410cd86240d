"""EDGE: the fleet job on Spark: many captures -> Hive-partitioned tables -> a fleet summary.

Input: capture paths, an output location, a Spark session.
Output: the tables as a data lake (dissector.frontends.partitioned's layout) and the summary.
Rule: `job` runs it; `journey_events` records the joiner's input in the tasks and replays it,
`journeys` moves and sorts those events in Spark, `subscriptions` computes the summary's
per-subscription section with Spark SQL.
"""
