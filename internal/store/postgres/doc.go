// Package postgres is the production store and the way out of one machine.
//
// Any number of server replicas share one database, so every decision that
// must be exclusive is made by a row predicate or a row lock in one statement:
// claims use FOR UPDATE SKIP LOCKED in a CTE (never IN (SELECT … LIMIT n …),
// PostgreSQL bug #15715), renewals and registration-token use re-check their
// predicates in the UPDATE itself, and "now" is clock_timestamp() — the
// statement clock — because now() is the transaction start and a transaction
// that waited on a lock would write expiries already in the past.
//
// Wake-ups cross replicas with LISTEN/NOTIFY; a lost notification only delays
// a claimer until its next poll, so the listener reconnects and broadcasts
// once rather than trying to be exact.
package postgres
