"""Pure decisions and views of the controller (the lowest layer). Functions of plain data and
``now``: Nodes, Runs and profiles as parsed views, selection and budgets, the ledger, the
objects to write, a Run's next action, the keys a change affects, the work queue and its
results. Table-tested; they import no I/O library (the import contract "Pure decision modules
import no I/O library") and nothing of ``controller.reconcile`` or ``controller.process``."""
