-- A played manual job's job input values (its `inputs:`), as JSON: the values that
-- differ from the defaults. A retry's new attempt keeps its values in its spec instead.
ALTER TABLE jobs ADD COLUMN input_values TEXT;
