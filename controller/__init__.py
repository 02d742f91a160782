"""The Signal controller: admission, reservation, Workflow submission, release and recovery.

Pure decision modules (nodes, requirements, eligibility, selection, budgets, ledger, manifests)
take plain data and ``now``; I/O lives in admission, recovery, nodecache, leader and main.
"""
