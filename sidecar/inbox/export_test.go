package inbox

// QueuedReceipts is how many deliveries wait for a group (tests).
func (in *Inbox) QueuedReceipts() int {
	if in.receipts == nil {
		return 0
	}
	return in.receipts.Queued()
}
