package auth

// IssuedShape and ClientID, for their table and fuzz tests.
var (
	IssuedShape = issuedShape
	ClientID    = clientID
)

// Remembered returns how many client addresses the failure limiter and how
// many key hashes the negative cache hold.
func (k *Keys) Remembered() (clients, negative int) {
	if k.lim != nil {
		k.lim.mu.Lock()
		clients = k.lim.f.len()
		k.lim.mu.Unlock()
	}
	if k.neg != nil {
		k.neg.mu.Lock()
		negative = k.neg.f.len()
		k.neg.mu.Unlock()
	}
	return clients, negative
}

// OnJoin makes k call f each time a lookup has joined its flight (the
// query shared by concurrent lookups of one key).
func OnJoin(k *Keys, f func()) { k.joined = f }
