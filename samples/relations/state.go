package relations

import "encoding/json"

// decodeState copies an entity's state into a struct of the fields a
// projection needs.
func decodeState(state map[string]any, into any) error {
	raw, err := json.Marshal(state)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, into)
}
