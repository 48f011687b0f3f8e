// Package lifecycle gives every stored byte of a deployment its end (ADR
// 0035): DeleteSession removes everything a session owns, and Sweep
// removes what has become garbage since (a turn's journal once it is
// committed and kept long enough, ended processes and the trigger records
// of their deliveries, fired timers, deletion marks every read model
// has folded, objects no record names).
package lifecycle
