package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// errorBody is every error response.
type errorBody struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client went away; nothing to tell it
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorBody{Error: msg})
}

// requestError is a client mistake, answered with its status and message.
type requestError struct {
	status int
	msg    string
}

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &requestError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// decodeBody reads one JSON object from r's body into v: at most maxBodyBytes (413
// beyond), no unknown fields, nothing after the object.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !isJSON(ct) {
		return &requestError{status: http.StatusUnsupportedMediaType,
			msg: fmt.Sprintf("the request body must be JSON (Content-Type: application/json), got %q", ct)}
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			err = errors.New("unexpected data after the JSON object")
		}
	}
	var tooLarge *http.MaxBytesError
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &tooLarge):
		return &requestError{status: http.StatusRequestEntityTooLarge,
			msg: fmt.Sprintf("the request body is larger than %d bytes", maxBodyBytes)}
	case errors.Is(err, io.EOF):
		return badRequest("the request body is empty; want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("the request body ends in the middle of its JSON object")
	case errors.As(err, &syntax):
		return badRequest("the request body is not valid JSON at byte %d: %v", syntax.Offset, err)
	case errors.As(err, &typ) && typ.Field == "":
		return badRequest("the request body must be a JSON object, got a JSON %s", typ.Value)
	case errors.As(err, &typ):
		return badRequest("the request body's field %q must be %s, got a JSON %s", typ.Field, jsonType(typ.Type.String()), typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return badRequest("the request body has the unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return badRequest("the request body is not a valid JSON object: %v", err)
}

// isJSON reports whether a Content-Type names JSON in UTF-8, the only form the decoder
// reads: application/json, with no charset or charset=utf-8.
func isJSON(contentType string) bool {
	mediaType, params, err := mime.ParseMediaType(contentType)
	if err != nil || mediaType != "application/json" {
		return false
	}
	cs, ok := params["charset"]
	return !ok || strings.EqualFold(cs, "utf-8")
}

// jsonType names a Go type the way a JSON client thinks of it.
func jsonType(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "an array of " + jsonType(goType[2:]) + "s"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "*int"):
		return "an integer"
	case goType == "string":
		return "a string"
	}
	return goType
}
