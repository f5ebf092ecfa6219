// Package basiccrud is the smallest kumiko app: one entity with CRUD and
// nothing else. The author writes no events, no reducer and no table; every
// change is still recorded, and `inspect` shows a contact's whole history.
package basiccrud

import "github.com/kumiko-go/kumiko/feature"

// Feature is an address book: contacts with a name, a unique email and a
// phone number, created, changed and deleted by users of a tenant.
var Feature = feature.Define("contacts", func(r *feature.Registrar) {
	r.Entity("contact", feature.Fields{
		"name":  feature.Text().Required().MaxLen(200).Sortable(),
		"email": feature.Text().Required().MaxLen(320).Unique(),
		"phone": feature.Text().MaxLen(50),
	}, feature.SoftDelete())
	r.Crud("contact", feature.Access{Write: feature.Roles("Admin", "User"), Read: feature.AnyUser()})
})

// Contact is a contact as the API answers it.
type Contact struct {
	ID      string `json:"id"`
	Version int    `json:"version"`
	Name    string `json:"name"`
	Email   string `json:"email"`
	Phone   string `json:"phone"`
}
