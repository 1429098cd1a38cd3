package github

// Cached reports how many tokens the cache holds, for the external tests.
func (a *App) Cached() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.cache)
}
