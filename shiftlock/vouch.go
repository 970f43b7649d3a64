package shiftlock

// track registers g's slot for owner recognition with tag (0: relay only).
func (c *Client) track(g *Guard, tag uint64) {
	if !c.cfg.OwnerTags {
		return
	}
	g.ownBuf.entry, g.ownBuf.tag, g.ownBuf.self = g.entry, tag, g.self.Target
	g.own = &g.ownBuf
	c.owners.add(g.self.Target, g.own)
}

// queuedBehind records the writer ahead of g while g is queued, and takes
// up the questions that arrived before it was known.
func (g *Guard) queuedBehind(pred Tail) {
	o := g.own
	if o == nil {
		return
	}
	o.mu.Lock()
	o.pred, o.known = pred, true
	parked := o.parked
	o.parked = nil
	o.mu.Unlock()
	for _, q := range parked {
		g.c.ownerQuery(g.self.Target, g.entry, q)
	}
}

// headOfQueue records that g holds the lock itself: questions stop here.
func (g *Guard) headOfQueue() { g.queuedBehind(Tail{}) }

// letGo ends g's answers for its owner: the owner released it, or its wait
// was given up before anyone was told. The slot may stay in the queue for a
// while yet, passing the lock on, so it keeps relaying questions up the
// queue, and the questions it was keeping for a vouch that will not come
// now travel on.
func (g *Guard) letGo() {
	o := g.own
	if o == nil {
		return
	}
	o.mu.Lock()
	o.gone = true
	g.c.owners.unlist(o)
	subs := o.takeSubs()
	o.mu.Unlock()
	g.passOn(subs)
}

// takeSubs empties the questions waiting for o's vouch and returns them;
// o.mu is held.
func (o *owner) takeSubs() []query {
	subs := o.subs
	o.subs = nil
	return subs
}

// passOn sends subs, questions that were waiting for g's vouch, on up the
// queue: g will not answer them now. A copy that waited on g as its node's
// listed writer (viaList) is dropped, as its question walks on anyway.
func (g *Guard) passOn(subs []query) {
	for _, q := range subs {
		if !q.viaList {
			g.c.ownerQuery(g.self.Target, g.entry, q)
		}
	}
}

// Vouch records that g's owner has been told it holds the lock. From now
// until g is released, g's slot answers every question about its owner tag
// with msgSameOwner and g's token, including the questions that arrived
// before. Only a vouched writer is ever recognised: a wait that its caller
// gave up also receives the lock, but nobody was told, so nobody else may
// act on it. A guard without a tag ignores Vouch.
func (g *Guard) Vouch() {
	o := g.own
	if o == nil || o.tag == 0 {
		return
	}
	token := g.Token()
	o.mu.Lock()
	if o.closed || o.gone || o.vouched {
		o.mu.Unlock()
		return
	}
	o.vouched, o.token = true, token
	subs := o.takeSubs()
	o.mu.Unlock()
	for _, q := range subs {
		g.c.answerSame(g.entry, q, token)
	}
}

// Retag makes g answer for owner tag tag instead of the one it was
// acquired with: its owner's identity changed while it holds the lock (a
// proxy's client re-obtained the key under a new token). From now on
// questions about the old tag are not g's, and questions about the new one
// are, once g is vouched for. Questions that were waiting for a vouch under
// the old tag travel on, as when g lets go. Tag 0 makes g answer for no
// tag at all (the new owner is not one recognition may name). A guard
// without a tag ignores Retag: its owner takes no part in recognition.
// g.tag, what the acquisition carried, stays: it only mattered while g was
// queued.
func (g *Guard) Retag(tag uint64) {
	o := g.own
	if o == nil || o.tag == 0 {
		return
	}
	o.mu.Lock()
	if o.tag == tag {
		o.mu.Unlock()
		return
	}
	g.c.owners.unlist(o) // listed under the old tag; a visit lists it anew
	o.tag = tag
	subs := o.takeSubs()
	o.mu.Unlock()
	g.passOn(subs)
}
