package httpapi

import (
	"github.com/gofiber/fiber/v2"

	"github.com/idempotent-claim/idempotent-claim/sidecar/apperr"
	"github.com/idempotent-claim/idempotent-claim/sidecar/auth"
	"github.com/idempotent-claim/idempotent-claim/sidecar/backfill"
	"github.com/idempotent-claim/idempotent-claim/sidecar/ingest"
)

// Gap detection and backfill (package backfill), for the key's tenant:
//
//	POST /v1/sources/{source}/backfill/scans   {"mode": "report"}?  → 202 {scan_job, already_running}
//	GET  /v1/sources/{source}/backfill/scans                        → {scans: [...]}, newest first (50)
//	GET  /v1/sources/{source}/backfill/events?state=missed          → {events: [...]}, newest first (200)
//
// A source of another tenant, or none, is 404 not_found; a source without
// backfill 409 invalid_state.

// backfillSource is the caller's tenant's source with backfill.
func (s *Server) backfillSource(c *fiber.Ctx) (*ingest.Source, auth.Principal, error) {
	p, _ := c.Locals(principalKey).(auth.Principal)
	src := s.cfg.Inbox.TriggerSource(c.Params("source"))
	if src == nil || src.Tenant != p.Tenant {
		return nil, p, apperr.New(apperr.NotFound, "no such source")
	}
	if src.Backfill == nil {
		return nil, p, &apperr.Error{Code: apperr.InvalidState, Message: "this source has no backfill configuration (backfill: in the sources file)"}
	}
	return src, p, nil
}

type backfillScanBody struct {
	Mode string `json:"mode" validate:"omitempty,oneof=report fetch redeliver auto"`
}

func (s *Server) backfillStart(c *fiber.Ctx) error {
	src, p, err := s.backfillSource(c)
	if err != nil {
		return err
	}
	var b backfillScanBody
	body, err := s.body(c)
	if err != nil {
		return err
	}
	if len(body) > 0 {
		if err := s.decode(body, &b, ""); err != nil {
			return err
		}
	}
	mode, err := backfill.ModeFor(src, ingest.BackfillMode(b.Mode))
	if err != nil {
		return &apperr.Error{Code: apperr.Invalid, Field: "mode", Message: err.Error()}
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	id, already, err := backfill.Enqueue(ctx, s.cfg.Inbox, src, backfill.Trigger{Kind: backfill.TriggerAPI, Actor: p.KeyPrefix, Mode: mode})
	if err != nil {
		return err
	}
	return c.Status(fiber.StatusAccepted).JSON(fiber.Map{"scan_job": id, "already_running": already})
}

func (s *Server) backfillScans(c *fiber.Ctx) error {
	src, _, err := s.backfillSource(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	scans, err := backfill.ListScans(ctx, s.cfg.Inbox.Pool(), src.Tenant, src.Name, 50)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"scans": scans})
}

func (s *Server) backfillEvents(c *fiber.Ctx) error {
	src, _, err := s.backfillSource(c)
	if err != nil {
		return err
	}
	state := c.Query("state")
	switch state {
	case "", backfill.StateMissed, backfill.StateFetched, backfill.StateRedeliveryRequested, backfill.StateArrived, backfill.StateLateReal:
	default:
		return &apperr.Error{Code: apperr.Invalid, Field: "state",
			Message: "state must be missed, fetched, redelivery_requested, arrived or late_real"}
	}
	ctx, cancel := s.ctx(c)
	defer cancel()
	evs, err := backfill.ListEvents(ctx, s.cfg.Inbox.Pool(), src.Tenant, src.Name, state, 200)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"events": evs})
}
