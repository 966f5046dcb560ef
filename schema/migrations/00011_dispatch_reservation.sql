-- +goose Up
SET LOCAL lock_timeout = '5s';

-- The dispatch attempt in flight, reserved before its POST is sent: the
-- dispatcher sets a fresh holder token and a lease in its own committed
-- statement, and records the attempt's outcome only while it still holds
-- it (fenced like a claim token). Another run of the same dispatch (a
-- River job rescued while its POST may still be in flight) finds the live
-- lease and waits instead of posting the event a second time. Both NULL
-- when no attempt is in flight. Nullable columns without a default: a
-- catalog change, no table rewrite.
ALTER TABLE inbox_events
    ADD COLUMN dispatch_holder      uuid,
    ADD COLUMN dispatch_lease_until timestamptz;

-- +goose Down
ALTER TABLE inbox_events
    DROP COLUMN dispatch_lease_until,
    DROP COLUMN dispatch_holder;
