// Package elemkind names the machine type under an element type: its
// reflect.Kind, a named type (type Meters float64) by its underlying
// kind. ring.Comm's message header carries it and collective's
// reductions dispatch on it, once per call each.
package elemkind

import "reflect"

// Of is T's kind. A type switch on T's zero value names the
// predeclared types without a call into reflect (a twentieth of a 1-PE
// AllReduce of 8 bytes, and 1 % of a Comm's 8-byte ping-pong, when it
// was reflect.TypeFor(...).Kind() on every call); a named type takes
// reflect.
func Of[T any]() reflect.Kind {
	var z T
	switch any(z).(type) {
	case int8:
		return reflect.Int8
	case int16:
		return reflect.Int16
	case int32:
		return reflect.Int32
	case int64:
		return reflect.Int64
	case int:
		return reflect.Int
	case uint8:
		return reflect.Uint8
	case uint16:
		return reflect.Uint16
	case uint32:
		return reflect.Uint32
	case uint64:
		return reflect.Uint64
	case uint:
		return reflect.Uint
	case uintptr:
		return reflect.Uintptr
	case float32:
		return reflect.Float32
	case float64:
		return reflect.Float64
	case complex64:
		return reflect.Complex64
	case complex128:
		return reflect.Complex128
	}
	return reflect.TypeFor[T]().Kind()
}
