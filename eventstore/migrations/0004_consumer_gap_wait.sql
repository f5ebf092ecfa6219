-- The consumer dispatcher's gap_since column moved with its table to the
-- consumer package (consumer/migrations). This version stays, empty, so
-- versions remain dense and databases migrated before keep their history.
SELECT 1;
