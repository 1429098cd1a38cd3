package store

import (
	"slices"
	"sort"
)

// SortedLeaseKeys returns the keys sorted by Key, one per key (the first
// given), with a Limit below 1 read as 1: the order in which both stores
// take a run's keys, so that two acquirers never wait on each other.
func SortedLeaseKeys(in []LeaseKey) []LeaseKey {
	keys := slices.Clone(in)
	sort.SliceStable(keys, func(i, j int) bool { return keys[i].Key < keys[j].Key })
	out := keys[:0]
	for _, k := range keys {
		if len(out) > 0 && out[len(out)-1].Key == k.Key {
			continue
		}
		if k.Limit < 1 {
			k.Limit = 1
		}
		out = append(out, k)
	}
	return out
}
