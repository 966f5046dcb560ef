-- +goose Up
SET LOCAL lock_timeout = '5s';

-- One-time values a provider signs once per delivery (verify.Result.Nonce:
-- Mailgun's signature token), kept until expires_at so that a captured
-- signature cannot carry another body: a delivery whose nonce is here
-- with another delivery_hash is refused as unauthenticated; the same
-- delivery again (a provider retry, same nonce and same events) goes on
-- to the normal duplicate path. scope is the source's dedupe scope.
-- nonce_hash is the SHA-256 of the nonce (never the nonce itself: it is a
-- credential), delivery_hash the SHA-256 of the delivery's event ids and
-- payload hashes. Expired rows are deleted by the retention purge, by
-- expires_at.
CREATE TABLE delivery_nonces (
    tenant        text NOT NULL,
    scope         text NOT NULL,
    nonce_hash    bytea NOT NULL,
    delivery_hash bytea NOT NULL,
    expires_at    timestamptz NOT NULL,
    PRIMARY KEY (tenant, scope, nonce_hash)
);
CREATE INDEX delivery_nonces_expires_idx ON delivery_nonces (expires_at);

-- +goose Down
DROP TABLE delivery_nonces;
