-- Groups made with `POST /groups`: they exist without projects under them, with a name and a
-- description of their own. Rows without `created` are the namespaces of project paths.
ALTER TABLE group_ids ADD COLUMN created INTEGER NOT NULL DEFAULT 0;
ALTER TABLE group_ids ADD COLUMN name TEXT;
ALTER TABLE group_ids ADD COLUMN description TEXT NOT NULL DEFAULT '';
