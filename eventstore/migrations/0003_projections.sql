-- The projection tables moved to the pipeline package, which migrates them
-- itself (pipeline/migrations). This version stays, empty, so versions
-- remain dense and databases migrated before keep their history.
SELECT 1;
