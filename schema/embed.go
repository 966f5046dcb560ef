// Package schema holds the PostgreSQL migrations of the Idempotent Claim
// sidecar. The files in migrations/ are applied in order by goose
// (github.com/pressly/goose/v3), under a PostgreSQL advisory lock, either on
// sidecar start or by `claimd migrate`.
package schema

import "embed"

// Migrations is the embedded migrations/ directory: goose-annotated SQL files
// named NNNNN_description.sql.
//
//go:embed migrations/*.sql
var Migrations embed.FS

// Dir is the directory inside Migrations that holds the SQL files.
const Dir = "migrations"
