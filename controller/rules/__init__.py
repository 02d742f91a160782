"""Pure decisions and views of the controller: functions of plain data and ``now`` (Nodes,
Runs and profiles as parsed views, the ledger, the objects to write, the next action, the
work queue's keys and results), table-tested, importing no I/O library (the import contract
"Pure decision modules import no I/O library") and nothing else of the controller."""
