-- The consumer dispatcher's state table moved to the consumer package, which
-- migrates it itself (consumer/migrations). This version stays, empty, so
-- versions remain dense and databases migrated before keep their history.
SELECT 1;
