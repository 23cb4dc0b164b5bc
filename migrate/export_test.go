package migrate

// QueuedWrites returns how many writes wait for a group commit to take
// them: the tests of group commit wait for it to reach a count, instead of
// sleeping until the writes they started are likely queued.
func QueuedWrites[K comparable, V any](s *Store[K, V]) int {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	return len(s.queue)
}
