//! `#[derive(Equivalence)]` for `rcomm-mpi`: a struct's datatype is the struct of its fields'
//! datatypes at their offsets, with the struct's size as extent. Field types may be any type
//! with `Equivalence`, arrays `[T; N]` and tuples of those, nested.

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Ts;
use quote::quote;
use syn::{Data, DeriveInput, Fields, Type, parse_macro_input};

/// Derives `mpi::datatype::Equivalence` for a struct.
#[proc_macro_derive(Equivalence)]
pub fn derive_equivalence(input: TokenStream) -> TokenStream {
    let ast = parse_macro_input!(input as DeriveInput);
    match expand(&ast) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// An expression of type `mpi::datatype::UserDatatype` or `Out` for a type.
fn type_dt(ty: &Type) -> Ts {
    match ty {
        Type::Array(a) => {
            let elem = type_dt(&a.elem);
            let len = &a.len;
            quote! {{
                let __e = #elem;
                ::mpi::internal::array_of(::mpi::internal::dt_of(&__e), #len)
            }}
        }
        Type::Tuple(t) => {
            let idx: Vec<syn::Index> = (0..t.elems.len()).map(syn::Index::from).collect();
            let dts: Vec<Ts> = t.elems.iter().map(type_dt).collect();
            let names: Vec<syn::Ident> = (0..t.elems.len())
                .map(|i| quote::format_ident!("__f{}", i))
                .collect();
            quote! {{
                #( let #names = #dts; )*
                ::mpi::internal::structure_of(
                    &[ #( (::core::mem::offset_of!(#t, #idx), ::mpi::internal::dt_of(&#names)) ),* ],
                    ::core::mem::size_of::<#t>(),
                )
            }}
        }
        Type::Paren(p) => type_dt(&p.elem),
        Type::Group(g) => type_dt(&g.elem),
        _ => quote! { <#ty as ::mpi::datatype::Equivalence>::equivalent_datatype() },
    }
}

fn expand(ast: &DeriveInput) -> syn::Result<Ts> {
    let name = &ast.ident;
    if !ast.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &ast.generics,
            "#[derive(Equivalence)] does not support generic structs",
        ));
    }
    let Data::Struct(s) = &ast.data else {
        return Err(syn::Error::new_spanned(
            ast,
            "#[derive(Equivalence)] supports structs only",
        ));
    };
    let (members, types): (Vec<Ts>, Vec<&Type>) = match &s.fields {
        Fields::Named(f) => f
            .named
            .iter()
            .map(|x| {
                let id = x.ident.as_ref().expect("named field");
                (quote! { #id }, &x.ty)
            })
            .unzip(),
        Fields::Unnamed(f) => f
            .unnamed
            .iter()
            .enumerate()
            .map(|(i, x)| {
                let i = syn::Index::from(i);
                (quote! { #i }, &x.ty)
            })
            .unzip(),
        Fields::Unit => (Vec::new(), Vec::new()),
    };
    let dts: Vec<Ts> = types.iter().map(|t| type_dt(t)).collect();
    let names: Vec<syn::Ident> = (0..types.len())
        .map(|i| quote::format_ident!("__f{}", i))
        .collect();
    Ok(quote! {
        unsafe impl ::mpi::datatype::Equivalence for #name {
            type Out = ::mpi::datatype::DatatypeRef<'static>;
            fn equivalent_datatype() -> Self::Out {
                static __DT: ::mpi::internal::OnceLock<::mpi::datatype::UserDatatype> =
                    ::mpi::internal::OnceLock::new();
                ::mpi::internal::cached_derived(&__DT, || {
                    #( let #names = #dts; )*
                    ::mpi::internal::structure_of(
                        &[ #( (::core::mem::offset_of!(#name, #members), ::mpi::internal::dt_of(&#names)) ),* ],
                        ::core::mem::size_of::<#name>(),
                    )
                })
            }
        }
    })
}
